#!/usr/bin/env python3
"""Tests of the many-core matrix (ctest bench_runner_scaling and bench_bundle).

  check_scaling.py run BUILD     runs `run.py --scaling` on larson at 1 and 2 threads under glibc
                                 and magpie, one repetition, into a fresh folder, and checks it
  check_scaling.py bundle BUILD  builds a tiny device bundle (bench/bundle.sh: larson, 1 and 2
                                 threads, a fiftieth of the work, nothing fetched, and
                                 magnostat: HEAD with bench/variants/nostat.patch), runs its
                                 runner with a PATH that holds only sh, mkdir, rm, cat, cp, tar
                                 and gzip (no python3), one variant of magpie's options
                                 (and jemalloc@narenas:1 where the bundle has jemalloc) and
                                 PACK=1, summarises the .tgz with scaling.py --from-bundle and
                                 checks; then its session.sh, small (one .tgz with the
                                 counters, the packed runs and bench_large's rows), and its
                                 profiler (profile.sh, perf) on larson at 2 threads under magpie

The checks: the allocators' preloads were verified (magpie's exit report counted allocations);
the CSV has one line per run, each with status 0 and a RESULT line; every cell has a positive
median rate and peak RSS and no failure; magpie's cells name a best peer; the Markdown has the
ratio table with a number for each thread count; the SVG parses and has the larson panel with a
line for each allocator; magpie's exit report of every run was read, with operations, misses and
a busiest class, and the Markdown has its table; every run has its counters (hardware counts,
or counters=none with the reason) and the CPUs' link (a time, or none), and where any run has
a figure per operation the Markdown has their table; and no other build of magpie's (magbase,
mag<name>) is taken for a peer. Exit status 1 with the reasons when one fails."""

import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "{http://www.w3.org/2000/svg}"
ALLOCS = ["glibc", "magpie"]
THREADS = [1, 2]


def check(json_path, csv_path, svg_path, md_path, allocs=ALLOCS):
    failures = []
    with open(json_path) as f:
        data = json.load(f)
    if not data.get("preloads_checked"):
        failures.append("the preloads were not checked")
    names = [a["name"] for a in data["allocators"]]
    if names != allocs:
        failures.append("allocators %s, wanted %s" % (names, allocs))
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != len(allocs) * len(THREADS):
        failures.append("%d runs in the CSV, wanted %d" % (len(rows), len(allocs) * len(THREADS)))
    for r in rows:
        if r["status"] != "0" or not r["result"].startswith("RESULT larson "):
            failures.append("run %s: status %s, result %r" % (r, r["status"], r["result"]))
        if "cycles=" not in r["counters"] and "counters=none:" not in r["counters"]:
            failures.append("run %s: no counters, nor why not" % r)
        if "link_ns=" not in r["counters"]:
            failures.append("run %s: no link_ns (the CPUs' link, or none)" % r)
    if any(c["per_op"] for c in data["cells"]) and "## Counters per operation" not in \
            open(md_path).read():
        failures.append("figures per operation, but no table of them in the Markdown")
    cells = {(c["workload"], c["threads"], c["allocator"]): c for c in data["cells"]}
    for t in THREADS:
        for a in allocs:
            c = cells.get(("larson", t, a))
            if c is None:
                failures.append("no cell for larson at %d threads under %s" % (t, a))
                continue
            if not c["median"] or c["median"] <= 0 or not c["rss_median_kib"] or c["failures"]:
                failures.append("cell larson/%d/%s: %s" % (t, a, c))
            if a == "magpie" and c.get("best_peer") != "glibc":
                failures.append("cell larson/%d/magpie names best peer %s" %
                                (t, c.get("best_peer")))
    with open(md_path) as f:
        md = f.read()
    if any("link_ns=" in r["counters"] and "link_ns=none" not in r["counters"] for r in rows) \
            and "The link between two CPUs" not in md:
        failures.append("runs measured the CPUs' link, but the Markdown does not say it")
    ratio_rows = [line for line in md.splitlines() if line.startswith("| larson | ")]
    if not ratio_rows or len([x for x in ratio_rows[0].split("|")[2:4]
                              if x.strip().replace(".", "").isdigit()]) != 2:
        failures.append("no ratio row with two numbers for larson: %s" % ratio_rows)
    counters = {c["threads"]: c for c in data.get("magpie_counters", [])
                if c["workload"] == "larson"}
    for t in THREADS:
        c = counters.get(t)
        if c is None or c["runs"] != 1 or c["ops"] <= 0 or c["misses"] <= 0 or \
                not c["class"] or c["class"]["allocs"] <= 0:
            failures.append("magpie's exit report of larson at %d threads: %s" % (t, c))
    if "| larson | 1 | 1 | " not in md or "## magpie's own counters" not in md:
        failures.append("no table of magpie's own counters in the Markdown")
    root = ET.parse(svg_path).getroot()
    panels = [g for g in root.iter(NS + "g") if g.get("data-workload") == "larson"]
    lines = [p.get("data-allocator") for g in panels for p in g.iter(NS + "polyline")]
    if sorted(lines) != sorted(allocs):
        failures.append("the SVG's larson panel has lines for %s, wanted %s" % (lines, allocs))
    for v in allocs[len(ALLOCS):]:
        if not any(line.startswith("| larson, %s | " % v) for line in md.splitlines()):
            failures.append("no ratio row for the variant %s" % v)
    return failures


def peers_check():
    """magpie's other builds (bench/bundle.sh -B, -V) and the allocators under option sets
    (VARIANTS) are no peers: a faster magbase, magexp or jemalloc[narenas:1] is never a cell's
    best peer, a peer whose name only resembles theirs is."""
    sys.path.insert(0, HERE)
    import scaling
    stats = {("larson", 1, a): {"median": m} for a, m in
             (("magpie", 1.0), ("glibc", 2.0), ("magbase", 5.0), ("magexp", 4.0),
              ("magpie[x=1]", 6.0), ("jemalloc[narenas:1]", 7.0), ("mimalloc", 3.0))}
    allocs = [k[2] for k in stats]
    best = scaling.best_peer(stats, "larson", 1, allocs)
    return [] if best == ("mimalloc", 3.0) else ["best peer %s, wanted mimalloc" % (best,)]


def run_mode(build, tmp):
    out = os.path.join(tmp, "out")
    cmd = [sys.executable, os.path.join(HERE, "run.py"), "--scaling", "--workloads", "larson",
           "--threads", ",".join(map(str, THREADS)), "--allocators", ",".join(ALLOCS),
           "--reps", "1", "--no-deps", "--build", build, "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stdout[-3000:] + p.stderr[-2000:])
    if p.returncode != 0:
        return ["run.py --scaling exited with status %d" % p.returncode]
    found = glob.glob(os.path.join(out, "scaling-*.json"))
    if len(found) != 1:
        return ["%d results in %s, wanted 1" % (len(found), out)]
    base = found[0][:-len(".json")]
    return check(base + ".json", base + ".csv", base + ".svg", base + ".md")


def bundle_mode(build, tmp):
    dest = os.path.join(tmp, "bundle")
    out = os.path.join(tmp, "out")
    patch = os.path.join(HERE, "variants", "nostat.patch")
    p = subprocess.run(["sh", os.path.join(HERE, "bundle.sh"), "-n", "-t", "1,2", "-w", "0.02",
                        "-b", build, "-V", "magnostat=" + patch, dest], capture_output=True,
                       text=True)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        return ["bundle.sh exited with status %d" % p.returncode]
    # -V NAME=PATCH: HEAD with the patch applied, built and named as such.
    with open(os.path.join(dest, "allocators.txt")) as f:
        built = [line for line in f if line.startswith("magnostat|libmagnostat.so|git ")]
    if not built or not built[0].rstrip().endswith(" + nostat.patch") or \
            not os.path.exists(os.path.join(dest, "libmagnostat.so")):
        failures_patch = ["bundle.sh -V magnostat=%s: no such build in the bundle (%s)" %
                          (patch, built)]
    else:
        failures_patch = []
    # The device machine may have no python: the runner gets only a shell and four tools, and
    # tar (with gzip) to pack its output into one file (PACK=1).
    tools = os.path.join(tmp, "path")
    os.mkdir(tools)
    for t in ("sh", "mkdir", "rm", "cat", "cp", "tar", "gzip"):
        os.symlink(shutil.which(t), os.path.join(tools, t))
    # A variant of two options, the second the file of an exit report: the report written
    # shows that both reached magpie ('+' made ',').
    report = os.path.join(tmp, "variant.json")
    variant = "stats=json+stats_file=" + report
    variants = ["magpie[%s]" % variant]
    # A peer under its own options, where the bundle has jemalloc (PEER@SET): a row of its
    # own, no peer.
    with open(os.path.join(dest, "allocators.txt")) as f:
        if any(line.startswith("jemalloc|") for line in f):
            variants.append("jemalloc[narenas:1]")
    # The patched build runs too: its exit reports go to a folder of their own.
    builds = [] if failures_patch else ["magnostat"]
    env = {"PATH": tools, "REPS": "1", "WORKLOADS": "larson",
           "ALLOCATORS": " ".join(ALLOCS + builds),
           "VARIANTS": variant + " jemalloc@narenas:1" * (len(variants) > 1), "PACK": "1"}
    p = subprocess.run(["sh", os.path.join(dest, "run.sh"), out], env=env, capture_output=True,
                       text=True)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        return ["the bundle's run.sh exited with status %d" % p.returncode]
    if os.path.exists(out) or not os.path.exists(out + ".tgz"):
        return ["PACK=1 left %s and made no %s.tgz" % (out, out)]
    p = subprocess.run([sys.executable, os.path.join(HERE, "scaling.py"), "--from-bundle",
                        out + ".tgz"], capture_output=True, text=True)
    print(p.stdout[-2000:] + p.stderr)
    if p.returncode != 0:
        return ["scaling.py --from-bundle exited with status %d" % p.returncode]
    base = os.path.join(out, "scaling")
    failures = check(base + ".json", os.path.join(out, "runs.csv"), base + ".svg", base + ".md",
                     ALLOCS + builds + variants)
    for b in builds:
        with open(base + ".json") as f:
            cells = json.load(f).get("build_counters", {}).get(b, [])
        with open(base + ".md") as f:
            md = f.read()
        if sorted(c["threads"] for c in cells if c["workload"] == "larson") != THREADS or \
                "## %s's own counters" % b not in md:
            failures.append("no exit reports of the build %s in the summary: %s" % (b, cells))
    if not os.path.exists(report):
        failures.append("the variant's options did not reach magpie: no %s" % report)
    failures += failures_patch + session_check(dest, tools, os.path.join(tmp, "session"))
    return failures + profile_check(dest, tools, os.path.join(tmp, "profile"))


def run_script(dest, script, out, env):
    """Runs the bundle's script on out with only env; a failure's text, or None."""
    p = subprocess.run(["sh", os.path.join(dest, script), out], env=env, capture_output=True,
                       text=True)
    print(p.stdout + p.stderr)
    return None if p.returncode == 0 else \
        "the bundle's %s exited with status %d" % (script, p.returncode)


def session_check(dest, tools, out):
    """The bundle's session.sh, with the same PATH, small: one .tgz holding the crash check's
    count, the counters, the matrix's and producer/consumer's packed runs, a RESULT line of each
    large row and, where the bundle has perf, the packed profiles."""
    profiled = os.path.exists(os.path.join(dest, "profile.sh"))
    failed = run_script(dest, "session.sh", out,
                        {"PATH": tools, "SESSION_S": "120", "WORKLOADS": "larson", "REPS": "1",
                         "ALLOCATORS": "glibc magpie", "LARGE_REPS": "1", "LARGE_THREADS": "2",
                         "LARGE_MIB": "8", "PROFILE_CELLS": "larson:2", "CRASH_RUNS": "3",
                         "CRASH_THREADS": "2"})
    if failed:
        return [failed]
    if os.path.exists(out) or not os.path.exists(out + ".tgz"):
        return ["session.sh left %s and made no %s.tgz" % (out, out)]
    with tarfile.open(out + ".tgz") as tar:
        names = set(tar.getnames())
        large = tar.extractfile("session/large.txt").read().decode() \
            if "session/large.txt" in names else ""
        crash = tar.extractfile("session/crash.txt").read().decode() \
            if "session/crash.txt" in names else ""
    wanted = ["session/counters.txt", "session/matrix.tgz", "session/prodcons.tgz"]
    failures = ["session.tgz has no %s" % n
                for n in wanted + ["session/profile.tgz"] * profiled if n not in names]
    if not crash.startswith("servermix -t 2, magpie: 3 of 3 runs exited 0\n"):
        failures.append("crash.txt does not count 3 runs of 3 passed:\n%s" % crash)
    rows = [l for l in large.splitlines() if " magpie " in l and "RESULT large" in l]
    if len(rows) != 3:  # wake, trim with purge_batch=0 and =64
        failures.append("large.txt has %d rows of magpie's with a RESULT, not 3:\n%s"
                        % (len(rows), large))
    return failures


def profile_check(dest, tools, out):
    """The bundle's profiler, with the same PATH, on larson at 2 threads under magpie: its
    report has the RESULT line, magpie's malloc in the flat profile and malloc's annotation."""
    if not os.path.exists(os.path.join(dest, "profile.sh")):
        return ["the bundle has no profile.sh (no perf here: scripts/deps.sh test installs it)"]
    failed = run_script(dest, "profile.sh", out,
                        {"PATH": tools, "CELLS": "larson:2", "ALLOCATORS": "magpie",
                         "SCALE": "50", "FREQ": "10000"})
    if failed:
        return [failed]
    path = os.path.join(out, "larson-t2-magpie.txt")
    if not os.path.exists(path):
        return ["profile.sh wrote no %s" % path]
    text = open(path).read()
    failures = []
    if "RESULT larson" not in text:
        failures.append("the profile of larson has no RESULT line")
    if not any("libmagpie.so" in l and "malloc" in l for l in text.splitlines()):
        failures.append("the flat profile has no line for libmagpie.so's malloc")
    annotated = text.split("# annotate malloc", 1)[-1].split("# annotate free", 1)[0]
    if "# annotate malloc" not in text or not any(":" in l and "mov" in l
                                                  for l in annotated.splitlines()):
        failures.append("malloc's annotation has no instructions")
    if failures:
        print("the report:\n" + "\n".join(text.splitlines()[:40]))
        print("profile.log:\n" + open(os.path.join(out, "profile.log")).read())
    return failures


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("run", "bundle"):
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="check-scaling-") as tmp:
        failures = (run_mode if sys.argv[1] == "run" else bundle_mode)(build, tmp)
    failures += peers_check()
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("PASS: %s" % sys.argv[1])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
