#!/usr/bin/python3
"""Tests of the heap profile, one case per ctest test.

usage: test_profile.py MAGPIE PROFILE_PROBE CASE

MAGPIE is build/magpie; PROFILE_PROBE the program built from tools/profile_probe.c, whose
allocation sites leak_here (5,120,000 bytes kept), keep_here (15,360,000 bytes kept) and
churn_here (20,480,000 bytes allocated, all freed) the cases look for in the profiles. The
sampling rate is 4 KiB (a few thousand samples), so the estimates fall within a few percent
of the truth and the 25% tolerance cannot flake. Helpers come from test_magpie.py.
"""
import atexit
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

from test_magpie import Skip, check, magpie, main

PROBE = sys.argv[2]
OUT = tempfile.mkdtemp(prefix="magpie-profile-test.")
atexit.register(shutil.rmtree, OUT, True)
RATE = {"MAGPIE_OPTIONS": "profile_rate=4k"}
LEAK, KEEP, CHURN, LEFT, RIGHT = 20000 * 256, 20000 * 768, 20000 * 1024, 10000 * 512, 10000 * 640


def folded(path):
    """{leaf function: bytes} of a folded file."""
    found = {}
    with open(path) as f:
        for line in f:
            stack, value = line.rstrip("\n").rsplit(" ", 1)
            leaf = stack.split(";")[-1]
            found[leaf] = found.get(leaf, 0) + int(value)
    return found


def near(value, truth, what):
    check(abs(value - truth) <= truth / 4, "%s: %d bytes estimated, %d true" % (what, value, truth))


def profile_probe(*args, name="heap"):
    """Runs the probe under magpie run --profile; returns the profile's path."""
    path = os.path.join(OUT, name)
    magpie("run", "--profile", path, "--", PROBE, "exit", *args, env=RATE, expect=0)
    return path


def go():
    found = shutil.which("go") or ("/usr/local/go/bin/go"
                                   if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if not found:
        raise Skip("go (for go tool pprof) is not on PATH or in /usr/local/go/bin")
    return found


def pprof_top(binary, path, *options):
    r = subprocess.run([go(), "tool", "pprof", *options, "-top", binary, path],
                       capture_output=True, text=True, timeout=100)
    check(r.returncode == 0, "go tool pprof -top %s" % path, r)
    return r.stdout


def test_folded():
    path = profile_probe()
    live, allocated = folded(path + ".inuse.folded"), folded(path + ".alloc.folded")
    near(live.get("leak_here", 0), LEAK, "live leak_here")
    near(live.get("keep_here", 0), KEEP, "live keep_here")
    check(live.get("churn_here", 0) == 0, "churn_here freed everything: %s" % live)
    near(allocated.get("churn_here", 0), CHURN, "allocated churn_here")
    near(allocated.get("keep_here", 0), KEEP, "allocated keep_here")
    ratio = live["keep_here"] / live["leak_here"]
    check(2.4 <= ratio <= 3.6, "keep_here holds 3 times leak_here's bytes: %.2f" % ratio)
    # two sites taking turns at one depth: each its own stack (the remembered chains, stack.c)
    near(allocated.get("left_here", 0), LEFT, "allocated left_here")
    near(allocated.get("right_here", 0), RIGHT, "allocated right_here")


def test_pprof():
    path = profile_probe()
    with gzip.open(path) as f:
        data = f.read()
    check(len(data) > 100, "a protobuf in the gzip container: %d bytes" % len(data))
    top = pprof_top(PROBE, path)
    check("Type: inuse_space" in top, "live heap by default:\n" + top)
    rows = {m.group(2): float(m.group(1)) for m in
            re.finditer(r"^\s*\S+\s+([\d.]+)%.*\s(\S+)\s*$", top, re.M)}
    check("leak_here" in rows and "keep_here" in rows and "main" in top,
          "function names in pprof -top:\n" + top)
    check(60 <= rows["keep_here"] <= 90, "keep_here about 75% of the live heap:\n" + top)
    top = pprof_top(PROBE, path, "-sample_index=alloc_space")
    check("churn_here" in top, "churn_here in the allocation profile:\n" + top)


def test_flame():
    path = profile_probe()
    svg = os.path.join(OUT, "heap.svg")
    r = magpie("flame", path, "-o", svg, expect=0)
    root = ElementTree.parse(svg).getroot()
    check(root.tag.endswith("svg"), "an <svg> document", r)
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("title"))
    for name in ("leak_here", "keep_here", "main"):
        check(name in texts, "%s in the flame graph" % name, r)
    rects = [e for e in root.iter() if e.tag.endswith("rect")]
    check(len(rects) >= 5, "rectangles drawn", r)
    widths = {t.text.split(" ")[0]: float(g.find("{*}rect").get("width"))
              for g in root.iter() if g.tag.endswith("g") for t in g if t.tag.endswith("title")}
    ratio = widths["keep_here"] / widths["leak_here"]
    check(2.4 <= ratio <= 3.6, "widths by weight: keep_here %.2f times leak_here" % ratio)


def test_diff():
    old = profile_probe("20000", name="old")
    new = profile_probe("80000", name="new")
    r = magpie("profile-diff", old, new, expect=0)
    rows = [l for l in r.stdout.splitlines() if "<-" in l or l.strip().endswith("main")]
    check(rows and "leak_here" in rows[0].split()[-1] + rows[0],
          "leak_here grew most", r)
    check(re.search(r"^\s*1[0-9.]+ MiB .*leak_here", r.stdout, re.M),
          "about 15 MiB growth for leak_here", r)


def test_pid():
    stop = os.path.join(OUT, "stop")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["MAGPIE_OPTIONS"] = "profile_rate=4k,reap_ms=20"
    magpie_cmd = sys.argv[1]
    p = subprocess.Popen([magpie_cmd, "run", "--", PROBE, "wait", stop], env=env,
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check(line.startswith("ready "), "the probe started: %r" % line)
        pid = line.split()[1]
        path = os.path.join(OUT, "now")
        start = time.monotonic()
        r = magpie("profile", pid, path, expect=0)
        check(os.path.exists(path) and "inuse.folded" in r.stdout, "profile written", r)
        check(not os.path.exists("/tmp/magpie-profile." + pid), "request removed", r)
        live = folded(path + ".inuse.folded")
        near(live.get("leak_here", 0), LEAK, "live leak_here, taken at %.1f s" %
             (time.monotonic() - start))
        with gzip.open(path) as f:
            check(len(f.read()) > 100, "the pprof file decodes")
    finally:
        open(stop, "w").close()
        p.wait(timeout=30)
    check(p.returncode == 0, "the probe ended well")
    r = magpie("profile", str(p.pid), os.path.join(OUT, "gone"), expect=125)
    check("no process" in r.stderr, "a process that is gone is named", r)


def test_python():
    # The interpreter itself (a wrapper such as pyenv's shim would run several processes, each
    # writing the profile at its exit). Python frees its objects before exit: the allocation
    # profile is the one to look at.
    python = os.path.realpath(sys.executable)
    path = os.path.join(OUT, "python")
    code = "x = [bytes(2000 + i % 7) for i in range(40000)]\nprint(len(x))"
    magpie("run", "--profile", path, "--", python, "-c", code,
           env={"MAGPIE_OPTIONS": "profile_rate=64k"}, expect=0)
    allocated = open(path + ".alloc.folded").read()
    check(re.search(r"Py\w+", allocated), "python frames in the folded stacks:\n" + allocated[:2000])
    total = sum(int(l.rsplit(" ", 1)[1]) for l in allocated.splitlines())
    near(total, 40000 * 2000, "python's allocations")
    top = pprof_top(python, path, "-sample_index=alloc_space")
    check(re.search(r"\bPy\w+|_Py\w+", top), "python functions in pprof -top:\n" + top)


if __name__ == "__main__":
    sys.exit(main(globals()))
