#!/usr/bin/env python3
"""The many-core matrix (issue 20): throughput and peak RSS of six multi-threaded workloads at
1..64 threads under magpie and every peer, alternating, with medians and spread, the ratio of
magpie to the best peer in each cell, and an SVG of throughput against threads per workload.

  python3 bench/run.py --scaling [--threads 1,2,4] [--allocators glibc,magpie] [--reps 3]
  python3 bench/scaling.py ...               the same, without run.py
  python3 bench/scaling.py --from-bundle DIR tables and chart of a device bundle's results
                                             (DIR, or the DIR.tgz of its PACK=1)
  python3 bench/scaling.py --emit-plan FILE  the matrix's cells for bench/bundle.sh

Each run is one program of bench/ under one allocator (LD_PRELOAD here; the bundle's runner,
bench/bundle-run.sh, loads it with the bundled ld.so's --preload instead), started through
bench_rusage (bench/rusage.c), which gives its exit status, wall time and peak RSS. The programs
do a fixed total of work split between the threads and print their rate (operations, frees or
writes per second of their measured phase) on their RESULT line: that rate is the throughput.
Cells are run repetition by repetition; within a cell every allocator runs once, in an order
rotated by one at each repetition, so slow drifts of a shared machine spread over all of them.
A run that crashes, times out or fails its checks is recorded as such and the matrix goes on:
its cell shows "crash k/n" (or "fail"), and medians are of the runs that succeeded.
Every run, local or bundled, is one line of a CSV file (CSV_FIELDS); the tables, JSON and SVG
are made from those lines, so a bundle's results read exactly like a local run's.
magpie's runs also leave its exit report (MAGPIE_OPTIONS=stats=json: counters it keeps anyway,
written once the program ends) in a folder beside the CSV, named by stats_name; the summary's
last table reads them: where magpie's slow paths and locks went in each cell, so that a short
session on a machine lent for minutes brings back the why with the what.
Standard library only.
"""

import argparse
import csv
import datetime
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from xml.sax.saxutils import escape

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
LIBDIR = "/usr/lib/x86_64-linux-gnu" if os.path.isdir("/usr/lib/x86_64-linux-gnu") else \
    "/usr/lib/%s-linux-gnu" % platform.machine()

# The rows of the matrix: (name, what it models, program bench_<program>, its arguments with {t}
# for the thread count, the RESULT key of its rate, the rate's unit, the fewest threads it runs
# with). The work is fixed and split between the threads; sizes give about 0.3-1 s at 1 thread
# on the 2-CPU machine they were chosen on.
WORKLOADS = [
    ("larson", "server churn: threads replace random 8..2048-byte blocks, hand 1 in 16 through "
     "mailboxes and are replaced by successors 8 times (larson.c)",
     "larson", "-t {t} -i 3000000 -n 1000", "mops_per_s", "M ops/s", 1),
    ("prodcons", "producer/consumer: half the threads allocate 64-byte blocks in batches of 256, "
     "the other half free them (prodcons.c -n 64); rate = frees/s",
     "prodcons", "-t {t} -i 6000000 -n 64", "mblocks_per_s", "M frees/s", 2),
    ("threadchurn", "per-thread churn: each thread frees and allocates random 8..512-byte blocks "
     "of its own in 1024 slots (threadchurn.c, after glibc's bench-malloc-thread)",
     "threadchurn", "-t {t} -i 8000000", "mops_per_s", "M ops/s", 1),
    ("mstress", "mixed lifetimes: 10 rounds of threads started and joined; blocks live for a few "
     "operations, a thread's life or several rounds (mstress.c)",
     "mstress", "-t {t} -i 4000000", "mops_per_s", "M ops/s", 1),
    ("servermix", "server mix: threads churn 16..8192-byte blocks and hand 30% of them to the "
     "next thread through a mailbox (servermix.c)",
     "servermix", "-t {t} -i 3000000", "mops_per_s", "M ops/s", 1),
    ("scratch", "passive false sharing: blocks allocated by main, freed by the workers, whose "
     "next 8-byte blocks are written 100 times each (falseshare.c -m scratch, cache-scratch)",
     "falseshare", "-m scratch -t {t} -i 400000", "mwrites_per_s", "M writes/s", 1),
]
WORKLOAD_NAMES = [w[0] for w in WORKLOADS]
THREADS = [1, 2, 4, 8, 16, 32, 64]
ALLOCATORS = ["glibc", "magpie", "jemalloc", "tcmalloc", "mimalloc", "mimalloc3"]
SUBJECT = "magpie"
LOCKS_SHOWN = 3  # per cell in the table of magpie's own counters
REPS = 3
TIMEOUT_S = 120  # a run still going after this is killed and recorded as a timeout

# Peers: name -> (library, where it comes from). mimalloc3's lies under the build directory,
# unpacked from PyPI's cmeel-mimalloc wheel by scripts/peer-mimalloc3.sh (bench-deps.sh runs it).
DEBIAN_PEERS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
}
MIMALLOC3_VERSION = "3.4.3"
MIMALLOC3_SUBDIR = os.path.join("peers", "mimalloc3")
MIMALLOC3_LIB = os.path.join("cmeel.prefix", "lib", "libmimalloc.so.3")

# One line per run, written by this file and by bench/bundle-run.sh alike. status: the exit
# status, -N for signal N, or "timeout"; result: the program's RESULT line; counters: what
# bench_rusage counted (BENCH_COUNTERS=1: key=value words, or counters=none:ERRNO).
CSV_FIELDS = ["rep", "workload", "threads", "allocator", "status", "wall_s", "maxrss_kib",
              "result", "counters"]
# The per-operation figures of the counters table: (heading, counter, divided by).
PER_OP = [("cycles", "cycles", "ops"), ("instructions", "instructions", "ops"),
          ("IPC", "instructions", "cycles"), ("L1D misses", "l1d_misses", "ops"),
          ("LLC misses", "llc_misses", "ops"), ("branch misses", "branch_misses", "ops"),
          ("ordering clears", "clears_memory_ordering", "ops"),
          ("store-forward blocks", "store_forward_blocks", "ops"),
          ("CPU ns", "task_clock_ns", "ops")]

VARIANT_COLOURS = ["#e377c2", "#8c564b", "#17becf", "#bcbd22"]
COLOURS = {"glibc": "#888888", "magpie": "#d62728", "jemalloc": "#1f77b4",
           "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e", "mimalloc3": "#9467bd"}


def workload(name):
    return next(w for w in WORKLOADS if w[0] == name)


def cells(names, threads):
    """The (workload, threads) cells of the matrix, in the order they run."""
    return [(w[0], t) for w in WORKLOADS if w[0] in names for t in threads if t >= w[6]]


def argv_of(name, t, work=1.0):
    """The program's arguments at t threads, with its -i (the total work) times work."""
    argv = workload(name)[3].format(t=t).split()
    i = argv.index("-i") + 1
    argv[i] = str(max(1, int(int(argv[i]) * work)))
    return argv


# ---- allocators -------------------------------------------------------------------------------

def mimalloc3_path(build):
    return os.path.join(build, MIMALLOC3_SUBDIR, MIMALLOC3_LIB)


def package_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def magpie_version(path):
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d %H:%M")
    return "git %s, built %s" % (rev or "?", stamp)


def resolve(names, magpie, build, mimalloc3=None):
    """Returns ([(name, library to preload or None, version)], [(name, why it is skipped)])."""
    found, missing = [], []
    for n in names:
        if n == "glibc":
            found.append((n, None, "glibc " + glibc_version()))
        elif n == "magpie":
            if os.path.exists(magpie):
                found.append((n, magpie, magpie_version(magpie)))
            else:
                missing.append((n, "%s not found (build it: make)" % magpie))
        elif n in DEBIAN_PEERS:
            lib, pkg = DEBIAN_PEERS[n]
            path = os.path.join(LIBDIR, lib)
            if os.path.exists(path):
                found.append((n, path, "%s %s" % (pkg, package_version(pkg))))
            else:
                missing.append((n, "%s not found (scripts/bench-deps.sh installs %s)"
                                % (path, pkg)))
        elif n == "mimalloc3":
            path = mimalloc3 or mimalloc3_path(build)
            if os.path.exists(path):
                found.append((n, path, "cmeel-mimalloc %s (PyPI)" % MIMALLOC3_VERSION))
            else:
                missing.append((n, "%s not found (scripts/peer-mimalloc3.sh %s)"
                                % (path, os.path.join(build, MIMALLOC3_SUBDIR))))
        else:
            missing.append((n, "unknown allocator (known: %s)" % ", ".join(ALLOCATORS)))
    return found, missing


def glibc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (ValueError, OSError, IndexError):
        return "?"


def machine_description():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), "?")
    except OSError:
        pass
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
            "glibc": glibc_version(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "loadavg_start": os.getloadavg()[0]}


# ---- running ----------------------------------------------------------------------------------

def clean_env():
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "BENCH_CHILD_PRELOAD", "MALLOC_CONF", "MIMALLOC_OPTIONS",
              "MAGPIE_OPTIONS", "MAGPIE_DEBUG", "TCMALLOC_RELEASE_RATE"):
        env.pop(k, None)
    return env


def kv_words(text):
    """{key: value} of the key=value words of a line (bench_rusage's, a RESULT line's)."""
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


def stats_name(w, t, rep):
    """The file of magpie's exit report of one run (bench/bundle-run.sh names it alike)."""
    return "%s-t%d-r%d.json" % (w, t, rep)


def run_one(helper, exe, argv, preload, timeout, tmp, stats_file=None):
    """Runs exe under preload through bench_rusage, magpie's exit report going to stats_file
    when given; returns (status, wall_s, maxrss_kib, RESULT line or "", stderr's last lines)."""
    fd, stat = tempfile.mkstemp(prefix="rusage-", dir=tmp)
    os.close(fd)
    env = clean_env()
    env["BENCH_TIMEOUT_S"] = str(timeout)
    env["BENCH_COUNTERS"] = "1"
    if preload:
        env["BENCH_CHILD_PRELOAD"] = preload
    if stats_file:
        env["MAGPIE_OPTIONS"] = "stats=json,stats_file=" + stats_file
    try:
        p = subprocess.run([helper, stat, exe] + argv, env=env, capture_output=True, text=True,
                           timeout=timeout + 30, start_new_session=True, errors="replace")
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) else \
            (e.stdout or "")
        err = "the helper itself did not return"
    with open(stat) as f:
        kv = kv_words(f.read())
    os.unlink(stat)
    status = "timeout" if kv.get("timeout") == "1" or "status" not in kv else kv["status"]
    result = next((line for line in reversed(out.splitlines()) if line.startswith("RESULT ")), "")
    tail = " | ".join(err.strip().splitlines()[-3:])
    counts = " ".join("%s=%s" % (k, v) for k, v in kv.items()
                      if k not in ("status", "wall", "utime", "stime", "maxrss_kib", "timeout"))
    return status, kv.get("wall", ""), kv.get("maxrss_kib", ""), result, tail, counts


def check_preloads(build, allocs):
    """Runs a tiny larson under each allocator and says which did not serve it: ld.so only
    warns when a preload cannot be loaded, and the program then runs on glibc's malloc, which
    would put glibc's figures under another allocator's name. magpie must also print its exit
    report (MAGPIE_OPTIONS=stats=1) with allocations counted. {name: problem} of the bad ones."""
    exe = os.path.join(build, "bench", "bench_larson")
    bad = {}
    for name, lib, _ in allocs:
        if lib is None:
            continue
        env = clean_env()
        env["LD_PRELOAD"] = lib
        if name == SUBJECT:
            env["MAGPIE_OPTIONS"] = "stats=1"
        try:
            p = subprocess.run([exe, "-t", "2", "-i", "2000", "-n", "10"], env=env, text=True,
                               capture_output=True, timeout=60, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            bad[name] = "preload check failed: %s" % e
            continue
        if p.returncode != 0 or "cannot be preloaded" in p.stderr:
            bad[name] = "preload check failed: status %d, %s" % (
                p.returncode, " | ".join(p.stderr.strip().splitlines()[-2:]))
        elif name == SUBJECT and not any(len(line.split()) > 1 and
                                         line.split()[0] == "allocations" and
                                         line.split()[1] != "0" for line in p.stderr.splitlines()):
            bad[name] = "no exit report counting allocations: magpie did not serve the program"
    return bad


def classify(status, result, rate_key):
    """(rate or None, what went wrong or None) of one run from its CSV fields."""
    if status == "timeout":
        return None, "timeout"
    try:
        code = int(status)
    except ValueError:
        return None, "status %s" % status
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = "signal %d" % -code
        return None, "crash (%s)" % sig
    if code == 3:
        return None, "verification failed"
    if code != 0:
        return None, "exit %d" % code
    kv = kv_words(result)
    try:
        return float(kv[rate_key]), None
    except (KeyError, ValueError):
        return None, "no %s in its RESULT line" % rate_key


def run_matrix(args, allocs, names, threads, csv_path, stats_dir):
    helper = os.path.join(args.build, "bench", "bench_rusage")
    plan = []
    for rep in range(args.reps):
        for w, t in cells(names, threads):
            k = rep % len(allocs)
            for a in allocs[k:] + allocs[:k]:
                plan.append((rep, w, t, a))
    print("scaling: %d cells x %d allocators (%s) x %d repetitions = %d runs" %
          (len(cells(names, threads)), len(allocs), ", ".join(a[0] for a in allocs), args.reps,
           len(plan)), flush=True)
    if args.dry_run:
        for rep, w, t, (a, lib, _) in plan:
            if rep == 0:
                print("  %-11s t=%-3d %-9s %s bench_%s %s" % (w, t, a, "LD_PRELOAD=" + lib
                      if lib else "", workload(w)[2], " ".join(argv_of(w, t, args.work))))
        return None
    progs = {workload(w)[2] for w, _ in cells(names, threads)} | {"larson", "rusage"}
    missing = sorted("bench_" + p for p in progs
                     if not os.access(os.path.join(args.build, "bench", "bench_" + p), os.X_OK))
    if missing:
        print("scaling: not built in %s/bench: %s (make build)" % (args.build, ", ".join(missing)))
        return None
    bad = check_preloads(args.build, allocs)
    for name, why in bad.items():
        print("scaling: %s: %s" % (name, why))
    if bad:
        return None
    rows = []
    t0 = time.time()
    os.makedirs(stats_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="magpie-scaling-") as tmp, \
            open(csv_path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(CSV_FIELDS)
        for i, (rep, w, t, (a, lib, _)) in enumerate(plan):
            exe = os.path.join(args.build, "bench", "bench_" + workload(w)[2])
            report_to = os.path.join(stats_dir, stats_name(w, t, rep + 1)) if a == SUBJECT \
                else None
            status, wall, rss, result, tail, counts = run_one(
                helper, exe, argv_of(w, t, args.work), lib, args.timeout, tmp, report_to)
            row = [rep + 1, w, t, a, status, wall, rss, result, counts]
            out.writerow(row)
            f.flush()
            rows.append(dict(zip(CSV_FIELDS, map(str, row))))
            rate, why = classify(status, result, workload(w)[4])
            print("[%4d/%d] rep %d %-11s t=%-3d %-9s %s" %
                  (i + 1, len(plan), rep + 1, w, t, a,
                   "%8.2f %s  RSS %s MiB" % (rate, workload(w)[5], fmt_mib(rss)) if why is None
                   else "FAILED: %s%s" % (why, ("  stderr: " + tail) if tail else "")),
                  flush=True)
    print("%d runs in %.0f s" % (len(plan), time.time() - t0))
    return rows


# ---- summarising ------------------------------------------------------------------------------

def fmt_mib(kib):
    try:
        return "%.1f" % (float(kib) / 1024)
    except ValueError:
        return "?"


def fmt_load(x):
    try:
        return "%.1f" % float(x)
    except (TypeError, ValueError):
        return "?"


def fmt_rate(x):
    return "%.3g" % x if x < 100 else "%.0f" % x


def summarise(rows):
    """{(workload, threads, allocator): cell} over the CSV rows; a cell holds the rates and peak
    RSS of its successful runs and the reasons of its failed ones."""
    out = {}
    for r in rows:
        key = (r["workload"], int(r["threads"]), r["allocator"])
        c = out.setdefault(key, {"rates": [], "rss_kib": [], "failures": [], "runs": 0,
                                 "per_op": {}})
        c["runs"] += 1
        rate, why = classify(r["status"], r["result"], workload(r["workload"])[4])
        if why is None:
            c["rates"].append(rate)
            for name, v in per_op(r.get("counters") or "", r["result"], rate).items():
                c["per_op"].setdefault(name, []).append(v)
            try:
                c["rss_kib"].append(int(r["maxrss_kib"]))
            except ValueError:
                pass
        else:
            c["failures"].append(why)
    for c in out.values():
        rs = c["rates"]
        c["median"] = statistics.median(rs) if rs else None
        c["min"], c["max"] = (min(rs), max(rs)) if rs else (None, None)
        c["rss_median_kib"] = statistics.median(c["rss_kib"]) if c["rss_kib"] else None
        c["rss_min_kib"], c["rss_max_kib"] = (min(c["rss_kib"]), max(c["rss_kib"])) \
            if c["rss_kib"] else (None, None)
        c["per_op"] = {k: statistics.median(v) for k, v in c["per_op"].items()}
    return out


LINK_FAR = 2.5  # a run whose CPUs' link took this many times the median began far apart


def link_summary(links):
    """The link between two CPUs measured before each run (bench_rusage's link_ns), from
    (workload, link_ns) pairs, link_ns the helper's text ("none" or absent: not measured): its
    median over the runs, and how many runs of each workload began with it LINK_FAR times
    slower or worse (a shared host placed the CPUs far apart: cross-thread work runs slower
    then, for reasons of the host's); None where no run measured it."""
    ns = [(w, float(v)) for w, v in links if v not in (None, "none")]
    if not ns:
        return None
    median = statistics.median(v for _, v in ns)
    far = {}
    for w, v in ns:
        if v >= LINK_FAR * median:
            far[w] = far.get(w, 0) + 1
    return {"median_ns": median, "runs": len(ns), "far_runs": sum(far.values()),
            "far_by_workload": far}


def link_sentence(link):
    """What link_summary found, in one sentence for a report."""
    return ("The link between two CPUs before each run (bench_rusage's `link_ns`): median "
            "%.0f ns; %d of %d runs began with it %.1fx that or slower%s." %
            (link["median_ns"], link["far_runs"], link["runs"], LINK_FAR,
             " (%s): the host had placed the CPUs far apart, and their cells' spread "
             "includes them" % ", ".join("%s %d" % kv for kv in
                                         sorted(link["far_by_workload"].items()))
             if link["far_runs"] else ""))


def per_op(counters, result, rate):
    """{heading: figure} of PER_OP for one run: its counts over the operations of its measured
    phase (rate x the RESULT line's time; the counts cover the whole run, start-up included)."""
    try:
        ops = rate * 1e6 * float(kv_words(result)["time"])
        counts = {k: float(v) for k, v in kv_words(counters).items() if k != "counters"}
    except (KeyError, ValueError):
        return {}
    counts["ops"] = ops
    return {h: counts[num] / counts[den] for h, num, den in PER_OP
            if num in counts and counts.get(den)}


def magpie_counters(stats_dir):
    """magpie's exit reports (stats_name files in stats_dir), summed per cell over its runs:
    [{workload, threads, runs, ops, misses, cpu_misses, class: the busiest size class's figures,
    locks: the LOCKS_SHOWN locks that waited longest}], in the matrix's order."""
    cells = {}
    for name in sorted(os.listdir(stats_dir)) if os.path.isdir(stats_dir) else []:
        parts = name[:-len(".json")].rsplit("-", 2) if name.endswith(".json") else []
        if len(parts) != 3 or parts[0] not in WORKLOAD_NAMES or not parts[1][1:].isdigit():
            continue
        try:
            with open(os.path.join(stats_dir, name)) as f:
                r = json.load(f)
        except (OSError, ValueError):
            continue  # a run that crashed may leave none, or half of one
        c = cells.setdefault((parts[0], int(parts[1][1:])), {
            "runs": 0, "ops": 0, "misses": 0, "cpu_misses": 0, "classes": {}, "locks": {}})
        c["runs"] += 1
        c["ops"] += r.get("allocs", 0) + r.get("frees", 0)
        c["misses"] += r.get("misses", 0)
        c["cpu_misses"] += sum(r.get("cpus_misses", []))
        for k in r.get("classes", []):
            agg = c["classes"].setdefault(k["size"], {"size": k["size"], "allocs": 0,
                                                      "depot_exchanges": 0, "mag_rounds": 0})
            agg["allocs"] += k["allocs"]
            agg["depot_exchanges"] += k["depot_exchanges"]
            agg["mag_rounds"] = max(agg["mag_rounds"], k["mag_rounds"])
        for lk in r.get("locks", []):
            agg = c["locks"].setdefault(lk["name"], {"name": lk["name"], "acquisitions": 0,
                                                     "contended": 0, "wait_ns": 0})
            for f in ("acquisitions", "contended", "wait_ns"):
                agg[f] += lk[f]
    out = []
    for (w, t), c in sorted(cells.items(), key=lambda kv: (WORKLOAD_NAMES.index(kv[0][0]),
                                                          kv[0][1])):
        busiest = max(c["classes"].values(), key=lambda k: k["allocs"], default=None)
        locks = sorted((lk for lk in c["locks"].values() if lk["contended"]),
                       key=lambda lk: (-lk["wait_ns"], -lk["contended"]))[:LOCKS_SHOWN]
        out.append({"workload": w, "threads": t, "runs": c["runs"], "ops": c["ops"],
                    "misses": c["misses"], "cpu_misses": c["cpu_misses"], "class": busiest,
                    "locks": locks})
    return out


def build_counters(stats_dir):
    """{build: magpie_counters} of the other builds of magpie's whose reports the bundle's
    run.sh put in folders of their own under stats_dir (bench/bundle.sh -B, -V)."""
    subs = sorted(os.listdir(stats_dir)) if os.path.isdir(stats_dir) else []
    return {d: magpie_counters(os.path.join(stats_dir, d)) for d in subs
            if os.path.isdir(os.path.join(stats_dir, d))}


def counters_report(data, stats, names, threads, allocs):
    """The Markdown lines of the hardware counters per operation: magpie, its variants and the
    best peer of each cell, medians over their runs; or why there are none."""
    heads = [h for h, _, _ in PER_OP if any(h in c["per_op"] for c in data["cells"])]
    if not heads:
        return []
    out = ["", "## Counters per operation (medians)", "",
           "bench_rusage's counts (user space, every thread, the whole run) over the operations "
           "of the measured phase; CPU ns is the kernel's task clock."]
    absent = sorted({tok for r in data["runs"] for tok in (r.get("counters") or "").split()
                     if tok.startswith("counters=none")})
    if absent:
        out.append("No hardware counters on this machine (%s): CPU time only." %
                   ", ".join(absent))
    body = []
    for w in names:
        for t in threads:
            for a in [SUBJECT] + [v for v in allocs if is_variant(v)] + \
                    [best_peer(stats, w, t, allocs)[0]]:
                c = stats.get((w, t, a))
                if c is None or not c["per_op"]:
                    continue
                body.append([w, str(t), a] + ["%.3g" % c["per_op"][h] if h in c["per_op"]
                                              else "-" for h in heads])
    return out + ["", md_table(["workload", "threads", "allocator"] + heads, body)]


def counters_table(counters):
    """The Markdown table of magpie_counters' cells, figures per run."""
    body = []
    for c in counters:
        n = c["runs"]
        k = c["class"]
        busiest = "%d B: %.0f exchanges/run, %d rounds" % (
            k["size"], k["depot_exchanges"] / n, k["mag_rounds"]) if k else "-"
        locks = "; ".join("%s %.1f ms, %d/%d contended" % (
            lk["name"], lk["wait_ns"] / 1e6 / n, lk["contended"] // n, lk["acquisitions"] // n)
            for lk in c["locks"]) or "none contended"
        body.append([c["workload"], str(c["threads"]), str(n),
                     "%.2f" % (1000.0 * c["misses"] / c["ops"]) if c["ops"] else "-",
                     "%d" % (c["cpu_misses"] // n), busiest, locks])
    return md_table(["workload", "threads", "runs", "misses / 1,000 ops", "CPU misses / run",
                     "busiest class", "locks that waited longest (per run)"], body)


def is_variant(name):
    """Whether name is an allocator under an option set of the bundle's VARIANTS (magpie[SET],
    jemalloc[SET], ...) or another build of magpie's (bench/bundle.sh -B, -V: magbase, the
    library a change starts from, or mag<anything>): no peer, but a row of its own against the
    peers."""
    return "[" in name or (name.startswith("mag") and name != SUBJECT)


def colour(a, allocs):
    """The chart's colour of allocator a; variants take VARIANT_COLOURS in turn."""
    if not is_variant(a):
        return COLOURS.get(a, "#555")
    k = [x for x in allocs if is_variant(x)].index(a)
    return VARIANT_COLOURS[k % len(VARIANT_COLOURS)]


def best_peer(stats, w, t, allocs):
    """(name, median) of the peer with the highest median rate in a cell, or (None, None); no
    variant of magpie's is a peer."""
    peers = [(stats[(w, t, a)]["median"], a) for a in allocs
             if a != SUBJECT and not is_variant(a) and (w, t, a) in stats and
             stats[(w, t, a)]["median"] is not None]
    if not peers:
        return None, None
    m, a = max(peers)
    return a, m


def ratio_text(stats, w, t, allocs, subject=SUBJECT):
    """magpie's (or a variant's) median over the best peer's, with any crash said first."""
    s = stats.get((w, t, subject))
    if s is None:
        return "-"
    peer, pm = best_peer(stats, w, t, allocs)
    r = "%.2f" % (s["median"] / pm) if s["median"] is not None and pm else "-"
    if s["failures"]:
        crash = sum(1 for f in s["failures"] if f.startswith("crash"))
        what = "**crash** %d/%d" % (crash, s["runs"]) if crash else \
            "**failed** %d/%d" % (len(s["failures"]), s["runs"])
        return what + ("; the other runs %s" % r if r != "-" else "")
    return r


def md_table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def report(data):
    """The Markdown of a summarised matrix."""
    allocs = [a["name"] for a in data["allocators"]]
    stats = {(c["workload"], c["threads"], c["allocator"]): c for c in data["cells"]}
    names = [w for w in WORKLOAD_NAMES if any(k[0] == w for k in stats)]
    threads = sorted({k[1] for k in stats})
    m = data["machine"]
    out = ["# magpie many-core matrix, %s" % m.get("date", "?"), "",
           "%s CPUs (%s), Linux %s, %s; %d repetitions, allocators alternating within each cell "
           "(order rotated per repetition); medians, spread = lowest..highest run. Load average "
           "%s at start, %s at end. %s" % (m.get("nproc", "?"), m.get("cpu", "?"),
                                          m.get("kernel", "?"), m.get("glibc", "?"),
                                          data["reps"], fmt_load(m.get("loadavg_start")),
                                          fmt_load(m.get("loadavg_end")),
                                          data.get("note", "")), ""]
    link = data.get("link")
    if link:
        out += [link_sentence(link), ""]
    if data.get("command"):
        out += ["Command: `%s`" % " ".join(data["command"]), ""]
    if m.get("ended", "complete") != "complete":
        out += ["The runner stopped early: %s." % m["ended"], ""]
    for a in data["allocators"]:
        out.append("- %s: %s%s" % (a["name"], a["version"], " (`%s`)" % a["preload"]
                                    if a["preload"] else ""))
    for s in data.get("skipped", []):
        out.append("- skipped %s: %s" % (s["name"], s["why"]))
    out += ["", "## magpie / best peer (throughput, medians; 1.00 = level, below 1 = behind)", ""]
    body = []
    for w in names:
        row = [w]
        for t in threads:
            row.append(ratio_text(stats, w, t, allocs) if (w, t, SUBJECT) in stats else "-")
        peer = [best_peer(stats, w, t, allocs)[0] for t in threads]
        row.append(", ".join(dict.fromkeys(p for p in peer if p)) or "-")
        body.append(row)
        for v in [a for a in allocs if is_variant(a)]:
            body.append(["%s, %s" % (w, v)] + [ratio_text(stats, w, t, allocs, v)
                                               if (w, t, v) in stats else "-"
                                               for t in threads] + [""])
    out.append(md_table(["workload"] + ["%d thr" % t for t in threads] + ["best peers"], body))
    for w in names:
        unit = workload(w)[5]
        out += ["", "## %s: throughput, %s (median, lowest..highest)" % (w, unit), "",
                workload(w)[1] + ".", ""]
        body = []
        for t in threads:
            row = [str(t)]
            for a in allocs:
                s = stats.get((w, t, a))
                if s is None:
                    row.append("-")
                    continue
                txt = "%s (%s..%s)" % (fmt_rate(s["median"]), fmt_rate(s["min"]),
                                       fmt_rate(s["max"])) if s["median"] is not None else ""
                if s["failures"]:
                    txt += " **%s %d/%d**" % (s["failures"][0], len(s["failures"]), s["runs"])
                row.append(txt.strip())
            if any(k[:2] == (w, t) for k in stats):
                body.append(row)
        out.append(md_table(["threads"] + allocs, body))
        out += ["", "Peak RSS, MiB (median, lowest..highest):", ""]
        body = []
        for t in threads:
            row = [str(t)]
            for a in allocs:
                s = stats.get((w, t, a))
                row.append("%s (%s..%s)" % (fmt_mib(str(s["rss_median_kib"])),
                                            fmt_mib(str(s["rss_min_kib"])),
                                            fmt_mib(str(s["rss_max_kib"])))
                           if s and s["rss_median_kib"] is not None else "-")
            if any(k[:2] == (w, t) for k in stats):
                body.append(row)
        out.append(md_table(["threads"] + allocs, body))
    out += counters_report(data, stats, names, threads, allocs)
    if data.get("magpie_counters"):
        out += ["", "## magpie's own counters (its exit reports)", "",
                "Summed over magpie's runs of each cell, shown per run: misses are operations "
                "that went past a thread's or CPU's magazines; the busiest class is the one "
                "with the most allocations; a lock's wait is the time its contended "
                "acquisitions waited.", "", counters_table(data["magpie_counters"])]
    for name, counters in sorted(data.get("build_counters", {}).items()):
        if counters:
            out += ["", "## %s's own counters (its exit reports)" % name, "",
                    "As magpie's, for this other build of it.", "", counters_table(counters)]
    fails = [(c["workload"], c["threads"], c["allocator"], f) for c in data["cells"]
             for f in c["failures"]]
    if fails:
        out += ["", "## Failed runs", ""]
        out += ["- %s at %d threads under %s: %s" % f for f in fails]
    return "\n".join(out) + "\n"


# ---- the chart --------------------------------------------------------------------------------

PANEL_W, PANEL_H, MARGIN_L, MARGIN_T, GAP_X, GAP_Y, COLS = 330, 210, 60, 90, 70, 70, 2


def draw_svg(data):
    """Throughput against threads, one panel per workload: each allocator's median as a line
    (x: threads, log scale; y: rate, linear from 0), a whisker from its lowest to its highest
    run, and an X on the axis at a thread count where one of its runs failed."""
    allocs = [a["name"] for a in data["allocators"]]
    stats = {(c["workload"], c["threads"], c["allocator"]): c for c in data["cells"]}
    names = [w for w in WORKLOAD_NAMES if any(k[0] == w for k in stats)]
    every_t = sorted({k[1] for k in stats})  # one x axis for all panels
    lo, hi = math.log2(every_t[0]), math.log2(every_t[-1])
    rows_n = max(1, math.ceil(len(names) / COLS))
    width = MARGIN_L + COLS * (PANEL_W + GAP_X) + 40
    height = MARGIN_T + rows_n * (PANEL_H + GAP_Y) + 20
    m = data["machine"]
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="16" font-size="13">%s</text>' % escape(
               "magpie many-core matrix: throughput against threads (higher is better), %s CPUs "
               "(%s), %s" % (m.get("nproc", "?"), m.get("cpu", "?"), m.get("date", "?")[:16])),
           '<text x="10" y="30" font-size="11">%s</text>' % escape(
               "medians of %d runs, whiskers from the lowest to the highest run (each allocator's "
               "drawn a little apart); X on the axis: a failed run (crash, timeout)"
               % data["reps"]),
           '<text x="10" y="43" font-size="11">%s</text>' % escape(data.get("note") or "")]
    lx = 10
    for a in allocs:
        out.append('<rect x="%d" y="51" width="14" height="4" fill="%s"/><text x="%d" y="57" '
                   'font-size="12">%s</text>' % (lx, colour(a, allocs), lx + 18, escape(a)))
        lx += max(110, 30 + 7 * len(a))  # a variant's name is longer
    for n, w in enumerate(names):
        px = MARGIN_L + (n % COLS) * (PANEL_W + GAP_X)
        py = MARGIN_T + (n // COLS) * (PANEL_H + GAP_Y)
        ts = sorted({k[1] for k in stats if k[0] == w})
        peak = max([stats[k]["max"] for k in stats if k[0] == w and stats[k]["max"]] or [1.0])
        step = nice_step(peak / 4)
        top = step * math.ceil(peak / step)

        def x(t):
            return px + 12 + (math.log2(t) - lo) / ((hi - lo) or 1) * (PANEL_W - 24)

        def y(v):
            return py + PANEL_H - v / top * PANEL_H

        out.append('<g class="panel" data-workload="%s">' % escape(w))
        out.append('<text x="%d" y="%d" font-size="13">%s (%s)</text>' %
                   (px, py - 8, escape(w), escape(workload(w)[5])))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' %
                   (px, py, PANEL_W, PANEL_H))
        for k in range(int(round(top / step)) + 1):
            v = step * k
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>'
                       '<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' %
                       (px, y(v), px + PANEL_W, y(v), px - 4, y(v) + 3, float("%.3g" % v)))
        for t in every_t:
            out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%d</text>' %
                       (x(t), py + PANEL_H + 13, t))
        out.append('<text x="%d" y="%d" font-size="10" text-anchor="middle">threads</text>' %
                   (px + PANEL_W // 2, py + PANEL_H + 26))
        for n_a, a in enumerate(allocs):
            col = colour(a, allocs)
            dx = (n_a - (len(allocs) - 1) / 2) * 3  # whiskers side by side, not on each other
            pts = [(t, stats[(w, t, a)]) for t in ts if (w, t, a) in stats]
            line = [(x(t), y(s["median"])) for t, s in pts if s["median"] is not None]
            if len(line) > 1:
                out.append('<polyline class="series" data-allocator="%s" fill="none" '
                           'stroke="%s" stroke-width="%s" points="%s"/>' %
                           (a, col, "2.5" if a == SUBJECT else "1.5",
                            " ".join("%.1f,%.1f" % p for p in line)))
            for t, s in pts:
                if s["median"] is not None:
                    out.append('<circle class="point" data-allocator="%s" data-threads="%d" '
                               'cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s, %s at %d '
                               'threads: %s %s (%s..%s)</title></circle>' %
                               (a, t, x(t), y(s["median"]), col, w, a, t, fmt_rate(s["median"]),
                                workload(w)[5], fmt_rate(s["min"]), fmt_rate(s["max"])))
                    out.append('<line class="whisker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
                               'stroke="%s" stroke-opacity="0.7"/>' %
                               (x(t) + dx, y(s["min"]), x(t) + dx, y(s["max"]), col))
                if s["failures"]:
                    cx, cy = x(t) + dx, py + PANEL_H - 6
                    out.append('<path class="failure" data-allocator="%s" d="M%.1f %.1fl8 8m0 '
                               '-8l-8 8" stroke="%s" stroke-width="2"><title>%s, %s at %d '
                               'threads: %s</title></path>' %
                               (a, cx - 4, cy - 4, col, w, a, t,
                                escape("; ".join(s["failures"]))))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def nice_step(v):
    """The smallest of 1, 2, 2.5, 5 x 10^k that is at least v: the step between the y ticks."""
    e = 10 ** math.floor(math.log10(v)) if v > 0 else 1
    return next(f * e for f in (1, 2, 2.5, 5, 10) if f * e >= v)


# ---- results ----------------------------------------------------------------------------------

def build_data(rows, allocs, skipped, machine, reps, command, note="", preloads_checked=True,
               counters=(), build_counters=None):
    stats = summarise(rows)
    return {"mode": "scaling", "machine": machine, "reps": reps, "command": command,
            "note": note, "preloads_checked": preloads_checked,
            "magpie_counters": list(counters),
            "build_counters": dict(build_counters or {}),
            "allocators": [{"name": n, "preload": p, "version": v} for n, p, v in allocs],
            "skipped": [{"name": n, "why": y} for n, y in skipped],
            "workloads": [{"name": w[0], "desc": w[1], "program": "bench_" + w[2],
                           "argv": w[3], "rate": w[4], "unit": w[5]} for w in WORKLOADS
                          if any(k[0] == w[0] for k in stats)],
            "runs": rows,
            "link": link_summary((r["workload"], kv_words(r.get("counters") or "").get("link_ns"))
                                 for r in rows),
            "cells": [dict(workload=k[0], threads=k[1], allocator=k[2],
                           best_peer=best_peer(stats, k[0], k[1], [a[0] for a in allocs])[0],
                           **v) for k, v in sorted(stats.items())]}


def save(data, base, csv_name=".csv"):
    with open(base + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(report(data))
    with open(base + ".svg", "w") as f:
        f.write(draw_svg(data))
    print("wrote %s.md, .json, .svg and %s" % (os.path.relpath(base), csv_name))


def unpack_bundle(path):
    """The folder of a runner's output: path itself, or for OUTDIR.tgz (PACK=1) the folder
    it holds, unpacked beside it."""
    if not path.endswith(".tgz"):
        return path
    beside = os.path.dirname(os.path.abspath(path))
    with tarfile.open(path) as tar:
        names = [m.name for m in tar.getmembers()]
        top = {n.split("/")[0] for n in names}
        if len(top) != 1 or any(n.startswith("/") or ".." in n.split("/") for n in names):
            sys.exit("scaling.py: %s does not hold one folder" % path)
        tar.extractall(beside)
    return os.path.join(beside, top.pop())


def from_bundle(folder, note, keep=True):
    """Summarises a bundle runner's output folder (runs.csv, machine.txt, allocators.txt), or
    the .tgz that PACK=1 made of it; keep: write the tables and the chart into the folder."""
    folder = unpack_bundle(folder)
    with open(os.path.join(folder, "runs.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    machine = {}
    if os.path.exists(os.path.join(folder, "machine.txt")):
        with open(os.path.join(folder, "machine.txt")) as f:
            machine = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    allocs = []
    if os.path.exists(os.path.join(folder, "allocators.txt")):
        with open(os.path.join(folder, "allocators.txt")) as f:
            for line in f:
                n, lib, v = (line.rstrip("\n").split("|") + ["", ""])[:3]
                allocs.append((n, lib or None, v))
    seen = list(dict.fromkeys(r["allocator"] for r in rows))
    allocs = [a for a in allocs if a[0] in seen] + \
        [(a, None, "?") for a in seen if a not in [x[0] for x in allocs]]
    reps = max([int(r["rep"]) for r in rows] or [0])
    stats_dir = os.path.join(folder, "stats")
    data = build_data(rows, allocs, [], machine, reps, ["--from-bundle", folder], note,
                      machine.get("preloads") == "ok", magpie_counters(stats_dir),
                      build_counters(stats_dir))
    if keep:
        save(data, os.path.join(folder, "scaling"), "runs.csv")
    print(report(data))
    return 0


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", help="thread counts, comma-separated (default %s)" %
                    ",".join(map(str, THREADS)))
    ap.add_argument("--allocators", help="subset of " + ",".join(ALLOCATORS))
    ap.add_argument("--workloads", help="subset of " + ",".join(WORKLOAD_NAMES))
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--build", default=os.path.join(ROOT, os.environ.get("BUILD") or "build"))
    ap.add_argument("--magpie", help="magpie library (default BUILD/libmagpie.so)")
    ap.add_argument("--magpie-version", metavar="TEXT")
    ap.add_argument("--mimalloc3", help="libmimalloc.so.3 (default BUILD/%s)" %
                    os.path.join(MIMALLOC3_SUBDIR, MIMALLOC3_LIB))
    ap.add_argument("--out", help="folder for the results (default BUILD/results)")
    ap.add_argument("--timeout", type=int, default=TIMEOUT_S, help="seconds per run")
    ap.add_argument("--note", default="", help="a line on the machine's state, in the results")
    ap.add_argument("--no-deps", action="store_true", help="do not run scripts/bench-deps.sh")
    ap.add_argument("--no-save", action="store_true", help="print only; write no files")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    ap.add_argument("--from-bundle", metavar="DIR",
                    help="summarise a bundle runner's results (a folder, or its .tgz)")
    ap.add_argument("--emit-plan", metavar="FILE", help="write the cells for bench/bundle.sh")
    ap.add_argument("--work", type=float, default=1.0,
                    help="the programs' total work (-i) times this (default 1; more for longer "
                         "runs, less noise, or many CPUs, where a run at 16 threads is short)")
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    if args.from_bundle:
        return from_bundle(args.from_bundle, args.note, not args.no_save)
    try:
        threads = [int(t) for t in args.threads.split(",")] if args.threads else THREADS
    except ValueError:
        print("scaling: --threads takes comma-separated numbers, not %r" % args.threads)
        return 2
    names = args.workloads.split(",") if args.workloads else WORKLOAD_NAMES
    bad = [w for w in names if w not in WORKLOAD_NAMES]
    if bad or any(t < 1 for t in threads) or args.reps < 1:
        print("scaling: unknown workload %s (known: %s), or a thread count or --reps below 1" %
              (",".join(bad), ",".join(WORKLOAD_NAMES)))
        return 2
    if args.list:
        for w in WORKLOADS:
            print("%-11s bench_%-11s %s\n            %s" % (w[0], w[2], w[3], w[1]))
        return 0
    if args.emit_plan:
        # name|threads|program|arguments: one cell a line, read by bench/bundle-run.sh
        with open(args.emit_plan, "w") as f:
            for w, t in cells(names, threads):
                f.write("%s|%d|bench_%s|%s\n" % (w, t, workload(w)[2],
                                                 " ".join(argv_of(w, t, args.work))))
        return 0
    args.build = os.path.abspath(args.build)
    if not args.no_deps and not args.dry_run:
        deps = os.path.join(ROOT, "scripts", "bench-deps.sh")
        if os.access(deps, os.X_OK):
            subprocess.run([deps], env=dict(os.environ, BUILD=args.build))
    wanted = args.allocators.split(",") if args.allocators else ALLOCATORS
    allocs, skipped = resolve(wanted, os.path.abspath(args.magpie or os.path.join(
        args.build, "libmagpie.so")), args.build, args.mimalloc3)
    if args.magpie_version:
        allocs = [(n, p, args.magpie_version if n == SUBJECT else v) for n, p, v in allocs]
    for n, why in skipped:
        print("scaling: SKIPPING %s: %s" % (n, why))
    if not allocs:
        print("scaling: no allocator to run")
        return 1
    out = args.out or os.path.join(args.build, "results")
    os.makedirs(out, exist_ok=True)
    base = os.path.join(out, "scaling-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    machine = machine_description()
    rows = run_matrix(args, allocs, names, threads, base + ".csv", base + "-stats")
    if rows is None:
        return 0 if args.dry_run else 1
    machine["loadavg_end"] = os.getloadavg()[0]
    data = build_data(rows, allocs, skipped, machine, args.reps, ["--scaling"] +
                      (argv if argv is not None else sys.argv[1:]), args.note, True,
                      magpie_counters(base + "-stats"))
    print()
    print(report(data))
    if args.no_save:
        os.unlink(base + ".csv")
        shutil.rmtree(base + "-stats", ignore_errors=True)
    else:
        save(data, base)
    # A failed run is a finding, not the harness's failure: exit 0 once the results exist.
    return 0


def main_from_run(args):
    """bench/run.py --scaling: the options run.py parsed, handed to main()."""
    if args.magpie_variants:
        print("run.py --scaling: --magpie-variants is not supported here")
        return 2
    argv = ["--reps", str(args.reps)] if args.reps else []
    for opt in ("threads", "allocators", "workloads", "magpie", "magpie_version", "out"):
        if getattr(args, opt):
            argv += ["--" + opt.replace("_", "-"), getattr(args, opt)]
    argv += ["--build", args.build]
    for flag in ("no_deps", "no_save", "list", "dry_run"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    return main(argv)


if __name__ == "__main__":
    sys.exit(main())
