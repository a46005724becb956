#!/usr/bin/python3
"""Tests of the magpie command, one case per ctest test.

usage: test_magpie.py MAGPIE ALLOC_PROBE CASE

MAGPIE is build/magpie (it finds build/libmagpie.so.1 beside itself); ALLOC_PROBE is the program
built from tools/alloc_probe.c. Each case runs the command, checks its exit status and output, and
checks that the temporary directory the command used was removed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MAGPIE, PROBE, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
LIBRARY = os.environ["MAGPIE_TEST_LIBRARY"]  # build/libmagpie.so.1, beside MAGPIE
VERSION = os.environ["MAGPIE_TEST_VERSION"]  # the project's version
TMPDIR = tempfile.mkdtemp(prefix="magpie-tool-test.")


class Failure(Exception):
    pass


def check(cond, what, result=None):
    if not cond:
        detail = ""
        if result is not None:
            detail = "\n--- exit status %d\n--- stdout:\n%s\n--- stderr:\n%s" % (
                result.returncode, result.stdout, result.stderr)
        raise Failure(what + detail)


def magpie(*args, env=None, expect=None):
    """Runs the command with TMPDIR set to the test's own directory; checks the exit status."""
    full_env = dict(os.environ)
    full_env.pop("MAGPIE_OPTIONS", None)
    full_env.pop("LD_PRELOAD", None)
    full_env["TMPDIR"] = TMPDIR
    full_env.update(env or {})
    r = subprocess.run([MAGPIE, *args], env=full_env, capture_output=True, text=True, timeout=50)
    if expect is not None:
        check(r.returncode == expect, "expected exit status %d" % expect, r)
    leftovers = os.listdir(TMPDIR)
    check(not leftovers, "temporary files left behind: %s" % leftovers, r)
    return r


def json_report(r):
    """The JSON object the command printed on stderr: its last line that starts with '{'."""
    lines = [l for l in r.stderr.splitlines() if l.startswith("{")]
    check(lines, "no JSON object on stderr", r)
    try:
        return json.loads(lines[-1])
    except ValueError as e:
        raise Failure("bad JSON (%s): %s" % (e, lines[-1]))


def number(text):
    return int(text.replace(",", ""))


def test_usage():
    r = magpie(expect=2)
    check("Usage: magpie run" in r.stderr and "--stats" in r.stderr, "usage on stderr", r)
    check(r.stdout == "", "nothing on stdout", r)


def test_help():
    for flag in ("--help", "-h"):
        r = magpie(flag, expect=0)
        for word in ("Usage: magpie run", "--stats", "--json", "LD_PRELOAD", "Example"):
            check(word in r.stdout, "help mentions %s" % word, r)
    r = magpie("run", "--help", expect=0)
    check("Usage: magpie run" in r.stdout, "run --help prints usage", r)


def test_version():
    r = magpie("version", expect=0)
    check(r.stdout == "magpie %s\n" % VERSION, "version line", r)


def test_unknown_command():
    r = magpie("frobnicate", expect=2)
    check("frobnicate" in r.stderr and "--help" in r.stderr, "error names the command", r)
    r = magpie("--frobnicate", expect=2)
    check("--frobnicate" in r.stderr, "error names the option", r)


def test_unknown_option():
    r = magpie("run", "--bogus", "--", "/bin/true", expect=2)
    check("--bogus" in r.stderr and "--help" in r.stderr, "error names the option", r)


def test_no_program():
    for args in (["run"], ["run", "--stats"], ["run", "--stats", "--"]):
        r = magpie(*args, expect=2)
        check("PROGRAM" in r.stderr, "error says PROGRAM is missing", r)


def test_stats_true():
    r = magpie("run", "--stats", "--", "/bin/true", expect=0)
    for word in ("allocations", "frees", "bytes requested", "peak live bytes", "peak RSS",
                 "peak mapped bytes"):
        check(re.search(r"^\s*%s\s+\S" % word, r.stderr, re.M), "report has %s" % word, r)
    check("no statistics" not in r.stderr, "the library wrote statistics", r)
    # One report format (the library's): tables without rows are left out.
    check("busiest size classes" not in r.stderr and "no size class" not in r.stderr,
          "no empty class table", r)
    env = dict(os.environ, LD_PRELOAD=LIBRARY, MAGPIE_OPTIONS="stats=1")
    lib = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True, timeout=50)
    check(lib.stderr.startswith("== magpie (pid ") and "busiest" not in lib.stderr
          and re.search(r"^  allocations\s+\d", lib.stderr, re.M), "stats=1 prints the tidy report",
          lib)


def test_exit_code():
    magpie("run", "--", "sh", "-c", "exit 7", expect=7)
    magpie("run", "sh", "-c", "exit 0", expect=0)
    r = magpie("run", "--stats", "--", "sh", "-c", "exit 42", expect=42)
    check("exited with status 42" in r.stderr, "report gives the status", r)


def test_signal_status():
    r = magpie("run", "--stats", "--", "sh", "-c", "kill -TERM $$", expect=128 + 15)
    check("signal 15" in r.stderr, "report names the signal", r)
    check("no statistics" in r.stderr, "report says the statistics are missing", r)
    check(re.search(r"peak RSS\s+\d", r.stderr), "report still gives peak RSS", r)
    r = magpie("run", "--json", "--", "sh", "-c", "kill -KILL $$", expect=128 + 9)
    j = json_report(r)
    check(j["exit_status"] == 137 and "error" in j and j["peak_rss_bytes"] > 0,
          "JSON has error, exit_status and peak_rss_bytes: %s" % j)


def test_json_counts():
    r = magpie("run", "--stats", "--json", "--", PROBE, expect=0)
    j = json_report(r)
    check(j.get("magpie") == 1, "\"magpie\":1 in %s" % j)
    check(j.get("exit_status") == 0, "exit_status 0 in %s" % j)
    check(j.get("peak_rss_bytes", 0) > 0, "peak_rss_bytes in %s" % j)
    for key in ("allocs", "frees"):
        check(j.get(key, 0) >= 1000, "%s >= 1000 in %s" % (key, j))
    for key in ("bytes_requested", "peak_live_bytes"):
        check(j.get(key, 0) >= 100000, "%s >= 100000 in %s" % (key, j))
    check(any(c["size"] >= 100 and c["allocs"] >= 1000 and c["frees"] >= 1000
              for c in j.get("classes", [])),
          "a class of size >= 100 with >= 1000 allocs and frees in %s" % j)
    hp = j.get("hugepages", {})
    check(hp.get("mode") in ("auto", "always", "never", "hugetlb") and "thp" in hp
          and "huge_bytes" in hp, "hugepages with mode, thp and huge_bytes in %s" % j)
    # --json alone implies --stats.
    j = json_report(magpie("run", "--json", PROBE, "2000", "300", expect=0))
    check(j.get("allocs", 0) >= 2000, "allocs >= 2000 in %s" % j)


def test_text_report():
    r = magpie("run", "--stats", "--", PROBE, "5000", "200", expect=0)
    m = re.search(r"^\s*allocations\s+(\d{1,3}(?:,\d{3})+)\s*$", r.stderr, re.M)
    check(m and number(m.group(1)) >= 5000, "allocations >= 5,000 with separators", r)
    m = re.search(r"^\s*bytes requested\s+[\d.]+ (?:KiB|MiB)\s+\(([\d,]+)\)", r.stderr, re.M)
    check(m and number(m.group(1)) >= 1000000, "bytes requested >= 1,000,000 in MiB", r)
    check("busiest size classes" in r.stderr, "report lists size classes", r)
    rows = re.findall(r"^\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+[\d.]+ [KMGTPE]?i?B\s+[\d,]+\s+[\d,]+\s+\d+\s*$",
                      r.stderr, re.M)
    check(0 < len(rows) <= 5, "one to five class rows", r)
    check(any(number(s) >= 200 and number(a) >= 5000 for s, a, _ in rows),
          "a class of size >= 200 with >= 5,000 allocs", r)
    check(re.search(r"^\s*on huge pages\s+.*\(hugepages=\w+, kernel THP \w+;", r.stderr, re.M),
          "the huge-page line names the option and the kernel's mode", r)
    allocs = [number(a) for _, a, _ in rows]
    check(allocs == sorted(allocs, reverse=True), "classes sorted by allocations", r)


def test_not_found():
    for prog in ("/nonexistent/magpie-no-such-program", "magpie-no-such-program"):
        for opts in ([], ["--stats"]):
            r = magpie("run", *opts, "--", prog, expect=127)
            check(prog in r.stderr and "not found" in r.stderr, "error names the program", r)
    j = json_report(magpie("run", "--json", "--", "magpie-no-such-program", expect=127))
    check(j["exit_status"] == 127 and "magpie-no-such-program" in j["error"], "JSON error: %s" % j)


def test_not_executable():
    path = os.path.join(tempfile.mkdtemp(prefix="magpie-tool-test."), "not-executable")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(path, 0o644)
    try:
        r = magpie("run", "--", path, expect=126)
        check(path in r.stderr, "error names the program", r)
    finally:
        shutil.rmtree(os.path.dirname(path))


def test_preload_kept():
    show = ["sh", "-c", 'printf "%s" "$LD_PRELOAD"']
    r = magpie("run", "--", *show, expect=0)
    check(r.stdout == LIBRARY, "LD_PRELOAD is the library beside magpie", r)
    r = magpie("run", "--", *show, env={"LD_PRELOAD": "libm.so.6"}, expect=0)
    check(r.stdout == LIBRARY + ":libm.so.6", "the library is put in front of LD_PRELOAD", r)


def test_options_kept():
    show = ["sh", "-c", 'printf "%s" "$MAGPIE_OPTIONS"']
    r = magpie("run", "--", *show, env={"MAGPIE_OPTIONS": "stats=text"}, expect=0)
    check(r.stdout == "stats=text", "MAGPIE_OPTIONS unchanged without --stats", r)
    r = magpie("run", "--stats", "--", *show, env={"MAGPIE_OPTIONS": "stats=text"}, expect=0)
    check(re.fullmatch(r"stats=text,stats=text,stats_file=/\S+/stats\.%p", r.stdout),
          "the tool's options follow the user's", r)
    # The library takes the last value of an option, so the report still works.
    j = json_report(magpie("run", "--json", "--", PROBE, env={"MAGPIE_OPTIONS": "stats=text"},
                           expect=0))
    check(j.get("allocs", 0) >= 1000, "allocs >= 1000 in %s" % j)


def test_quick_exit():
    r = magpie("run", "--stats", "--", PROBE, "--quick-exit", expect=0)
    check("no statistics" in r.stderr and "_exit" in r.stderr, "report says why", r)
    check(re.search(r"peak RSS\s+\d", r.stderr), "report still gives peak RSS", r)
    j = json_report(magpie("run", "--json", "--", PROBE, "--quick-exit", expect=0))
    check("error" in j and j["exit_status"] == 0 and j["peak_rss_bytes"] > 0, "JSON: %s" % j)


def test_child_processes():
    r = magpie("run", "--stats", "--", PROBE, "--fork", "3", expect=0)
    check("3 child processes also ran under magpie" in r.stderr, "report counts children", r)
    j = json_report(magpie("run", "--json", "--", PROBE, "--fork", "2", expect=0))
    check(j.get("child_processes") == 2, "child_processes 2 in %s" % j)


RECORD = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "tests", "plot",
                      "record.jsonl")
SVG = "{http://www.w3.org/2000/svg}"


def test_plot():
    """tests/plot/record.jsonl (41 samples over 4 s, 7 size classes, made up to look like a
    program that allocates, then frees most) drawn: the SVG parses as XML and holds the four
    heap series and the five classes with the most allocations, with their points."""
    import xml.etree.ElementTree as ET
    out_dir = tempfile.mkdtemp(prefix="magpie-plot-test.")
    try:
        out = os.path.join(out_dir, "record.svg")
        r = magpie("plot", RECORD, "-o", out, expect=0)
        check(r.stdout.strip() == out, "prints the picture's path", r)
        root = ET.parse(out).getroot()
        lines = {p.get("id"): p.get("points").split() for p in root.iter(SVG + "polyline")}
        want = ["rss", "live", "cached", "mapped",
                "class-32", "class-16", "class-64", "class-48", "class-128"]
        check(sorted(lines) == sorted(want), "series %s, wanted %s" % (sorted(lines), want))
        check(all(len(points) == 41 for points in lines.values()), "41 points per series")
        texts = [t.text for t in root.iter(SVG + "text")]
        for label in ["time (s)", "bytes (MiB)", "bytes (KiB)", "RSS", "live (in use)",
                      "cached (free, kept)", "mapped", "32 B: 33169 allocs"]:
            check(label in texts, "text %r in the picture: %s" % (label, texts))
        # The default output is beside the record, .jsonl replaced by .svg.
        copy = os.path.join(out_dir, "copy.jsonl")
        shutil.copy(RECORD, copy)
        r = magpie("plot", copy, expect=0)
        check(os.path.exists(os.path.join(out_dir, "copy.svg")), "copy.svg written", r)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def test_plot_bad_record():
    out_dir = tempfile.mkdtemp(prefix="magpie-plot-test.")
    try:
        bad = os.path.join(out_dir, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"t": 0.5, "rss_bytes": 100}\n\n{"rss_bytes": 7}\n')
        r = magpie("plot", bad, expect=125)
        check("bad.jsonl:3: not a record sample: a sample without \"t\"" in r.stderr,
              "names the line and the fault", r)
        with open(bad, "w") as f:
            f.write('{"t": 0.5, "rss_bytes": 100,}\n')
        r = magpie("plot", bad, expect=125)
        check("bad.jsonl:1:" in r.stderr, "a syntax error names its line", r)
        check(not os.path.exists(os.path.join(out_dir, "bad.svg")), "no picture written", r)
        r = magpie("plot", expect=2)
        check("plot: no FILE given" in r.stderr, "usage error without FILE", r)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def start_probe(*args, options="publish_ms=20"):
    """Starts the probe under magpie with the live area published often; waits for "ready"."""
    env = dict(os.environ, LD_PRELOAD=LIBRARY, MAGPIE_OPTIONS=options)
    p = subprocess.Popen([PROBE, *args], env=env, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "the probe started")
    return p


def read_live(pid, deadline=10.0, until=None):
    """`magpie stats --json PID` once the process has published a snapshot for which until(j)
    holds (the first one is taken at its start; retried until deadline s)."""
    end = time.monotonic() + deadline
    while True:
        r = magpie("stats", "--json", str(pid))
        if r.returncode == 0:
            j = json.loads(r.stdout)
            if until is None or until(j):
                return j
        check(time.monotonic() < end and (r.returncode == 0 or "not published yet" in r.stderr),
              "magpie stats read the process", r)
        time.sleep(0.05)


def test_stats_live():
    count, size = 1000, 3000
    p = start_probe("--hold", str(count), str(size), "8000")
    try:
        j = read_live(p.pid, until=lambda j: any(
            c["size"] >= size and c["frees"] >= count // 2 for c in j["classes"]))
        check(j["pid"] == p.pid and j["layout"].startswith("1."), "pid and layout: %s" % j)
        rows = [c for c in j["classes"] if c["size"] >= size and c["allocs"] >= count]
        check(rows, "a class of >= %d bytes with >= %d allocs in %s" % (size, count, j))
        c = rows[0]
        check(c["allocs"] == count and c["frees"] == count // 2,
              "the probe's class counts %d allocs, %d frees: %s" % (count, count // 2, c))
        for c in j["classes"]:
            check(c["live_bytes"] == (c["allocs"] - c["frees"]) * c["size"],
                  "live bytes = (allocs - frees) x size: %s" % c)
        check(j["live_bytes"] >= (count // 2) * size and j["mapped_bytes"] >= j["live_bytes"],
              "live and mapped bytes cover the probe's blocks: %s" % j)
        check(j["rss_bytes"] > 0 and j["huge_bytes"] == 0, "rss and huge bytes: %s" % j)
        main = [t for t in j["threads"] if t["tid"] == p.pid]
        check(len(main) == 1 and main[0]["allocs"] >= count and main[0]["frees"] >= count // 2,
              "the probe's main thread (tid = pid) with its blocks: %s" % j["threads"])
        first = j["published"]
        time.sleep(0.3)
        check(read_live(p.pid)["published"] > first, "the process keeps publishing")
        text = magpie("stats", str(p.pid), expect=0)
        check(re.search(r"^  live bytes\s+\d+", text.stdout, re.M), "text snapshot", text)
        check(re.search(r"^  busiest threads \(\d+ of \d+ live\):\n.*\n(\s+\d+.*\n)*\s+%d\s+\d+"
                        % p.pid, text.stdout, re.M), "the threads table, the probe's in it", text)
    finally:
        p.kill()
        p.wait()


def test_stats_young():
    """`magpie stats PID` 0.2 s after the process started, its threads busy, with the default
    publish interval (reap_ms, 1 s): the process published its first snapshot at its start, or
    the tool waits for it (issue 21, part 3)."""
    env = dict(os.environ, LD_PRELOAD=LIBRARY)
    env.pop("MAGPIE_OPTIONS", None)
    for attempt in range(3):
        p = subprocess.Popen([PROBE, "--contend-for", "4", "3000"], env=env,
                             stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.2)
            r = magpie("stats", str(p.pid))
            check(r.returncode == 0, "magpie stats of a 0.2 s old process", r)
            check(re.search(r"^== magpie \(pid %d" % p.pid, r.stdout, re.M) and
                  re.search(r"^  allocations\s+[\d,]+$", r.stdout, re.M), "its figures", r)
        finally:
            p.kill()
            p.wait()


def test_stats_largest():
    """`magpie stats` and `magpie top` of a process whose every figure is 2^64 - 1
    (tools/fake_area.c): each row of their tables keeps its columns apart (issue 21, part 4)."""
    fake = os.path.join(os.path.dirname(PROBE), "magpie_fake_area")
    p = subprocess.Popen([fake], stdout=subprocess.PIPE, text=True,
                         env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    try:
        check(p.stdout.readline().strip() == "ready", "the fake area is up")
        big = "18446744073709551615"
        r = magpie("stats", str(p.pid), expect=0)
        lines = r.stdout.splitlines()
        for label in ("allocations", "live bytes", "lost to rounding", "threads"):
            check(("  %-20s %15s" % (label, big)) in lines, "the line of %s" % label, r)
        wide = r"\d{12,20}(\.\d+)?"  # 2^64 - 1, or growing by 2^58 a snapshot; ns as ms
        for head, cells in (("size", [wide] * 7), ("lock", ["heap-arena"] + [wide] * 3),
                            ("thread", [wide] * 5)):
            at = [i for i, l in enumerate(lines) if l.split()[:1] == [head]]
            check(at and at[0] + 1 < len(lines), "a table headed %r" % head, r)
            row = lines[at[0] + 1].split()
            check(len(row) == len(cells) and all(re.fullmatch(c, x) for c, x in zip(cells, row)),
                  "the row under %r: each figure apart: %r" % (head, row), r)
        r = magpie("top", "--batch", "2", "--interval", "200", str(p.pid), expect=0)
        frames = top_frames(r.stdout)
        check(len(frames) == 2, "two frames", r)
        for frame in frames:
            classes, locks = top_tables(frame)
            check(len(classes) == 1 and classes[0]["size"] == int(big) and
                  classes[0]["name"] == "class 96", "the class row: %s" % classes, r)
            check(len(locks) == 1 and locks[0]["name"] == "heap-arena", "the lock row", r)
    finally:
        p.kill()
        p.wait()


def stats_of_fake_area(script):
    """`magpie stats` of a python process that runs script (it prints "ready" first), which
    plays a magpie process making its area."""
    p = subprocess.Popen([sys.executable, "-c", "import os, struct, time\n" + script],
                         stdout=subprocess.PIPE, text=True,
                         env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    try:
        check(p.stdout.readline().strip() == "ready", "the fake area is up")
        return magpie("stats", str(p.pid), expect=125)
    finally:
        p.kill()
        p.wait()


def test_stats_refused():
    """An area of an unknown major layout is refused, by name."""
    r = stats_of_fake_area("""
fd = os.memfd_create("magpie-live-stats")
os.write(fd, struct.pack("<QII", 0x545345495047414d, 99, 0) + bytes(4096 - 16))
print("ready", flush=True)
time.sleep(20)
""")
    check("layout 99.0" in r.stderr and "reads layout 1" in r.stderr, "refused by version", r)


def test_stats_unfinished():
    """A reader that comes while the area is being made (created, then sized, then written) waits
    for it: the fake publisher takes 0.4 s over each step and writes a layout the tool refuses,
    which the tool can only name once it waited through the empty and the zeroed file."""
    r = stats_of_fake_area("""
fd = os.memfd_create("magpie-live-stats")
print("ready", flush=True)
time.sleep(0.4)
os.ftruncate(fd, 4096)
time.sleep(0.4)
os.pwrite(fd, struct.pack("<QII", 0x545345495047414d, 99, 0), 0)
time.sleep(20)
""")
    check("layout 99.0" in r.stderr, "waited for the area to be written", r)


def test_stats_no_magpie():
    p = subprocess.Popen(["sleep", "20"], env={k: v for k, v in os.environ.items()
                                                if k != "LD_PRELOAD"})
    try:
        r = magpie("stats", str(p.pid), expect=125)
        check("no magpie statistics area" in r.stderr, "says there is no magpie", r)
    finally:
        p.kill()
        p.wait()
    r = magpie("stats", "999999999", expect=125)
    check("no such process" in r.stderr, "says there is no such process", r)
    magpie("stats", expect=2)


def test_record():
    out = os.path.join(tempfile.mkdtemp(prefix="magpie-record-test."), "rec.jsonl")
    try:
        r = magpie("run", "--record", out, "--interval", "50", "--", PROBE, "--hold", "500",
                   "1000", "1200", expect=0)
        with open(out) as f:
            lines = [json.loads(l) for l in f]
        check(len(lines) >= 5, "at least 5 lines in %s: %d" % (out, len(lines)))
        check("%d samples of the heap over time in %s; draw them: magpie plot %s" %
              (len(lines), out, out) in r.stderr, "the exit line points to magpie plot", r)
        # The record as written is what magpie plot reads.
        p = magpie("plot", out, expect=0)
        check(os.path.getsize(out[:-len(".jsonl")] + ".svg") > 0, "the record plotted", p)
        times = [l["t"] for l in lines]
        check(times == sorted(times) and len(set(times)) == len(times), "t increases: %s" % times)
        for key in ("t", "rss_bytes", "live_bytes", "cached_bytes", "mapped_bytes", "huge_bytes",
                    "allocs", "frees", "classes"):
            check(all(key in l for l in lines), "every line has %s" % key)
        check(all({"size", "allocs", "frees", "live_bytes"} <= set(c) for c in lines[-1]["classes"]),
              "class rows have size, allocs, frees, live_bytes")
    finally:
        shutil.rmtree(os.path.dirname(out))


def exit_json(*args, options=""):
    """The library's own JSON exit report of the probe run with args."""
    path = os.path.join(TMPDIR, "exit.json")
    env = dict(os.environ, LD_PRELOAD=LIBRARY,
               MAGPIE_OPTIONS="stats=json,stats_file=%s%s" % (path, options))
    r = subprocess.run([PROBE, *args], env=env, capture_output=True, text=True, timeout=50)
    check(r.returncode == 0, "the probe ran", r)
    with open(path) as f:
        j = json.load(f)
    os.unlink(path)
    return j


def test_counters():
    j = exit_json("--hold", "1000", "3000", "0")
    check(j["schema"] == 2, "schema 2")
    c = [c for c in j["classes"] if c["size"] >= 3000 and c["allocs"] >= 1000][0]
    check(c["allocs"] - c["frees"] == 500 and c["live_bytes"] == 500 * c["size"],
          "allocs - frees == live objects: %s" % c)
    check(c["slab_objects_out"] >= 500 and c["slab_objects"] >= c["slab_objects_out"]
          and c["slabs"] >= 1 and c["misses"] >= 1 and c["mag_rounds"] >= 1, "slab figures: %s" % c)
    check(j["rounding_bytes"] >= 1000 * (c["size"] - 3000), "rounding covers the class: %s" % j)
    check(all(k["swept"] >= 0 for k in j["classes"]), "every class row counts its sweeps: %s" % c)
    main = [t for t in j["threads"] if t["allocs"] >= 1000]
    check(len(main) == 1 and main[0]["frees"] >= 500 and main[0]["bytes_requested"] >= 1000 * 3000,
          "the probe's thread, live at exit, with its allocations: %s" % j["threads"])
    shares = sum(k["rounding_bytes"] for k in j["classes"])
    check(abs(shares - j["rounding_bytes"]) <= len(j["classes"]) and c["rounding_bytes"] > 0,
          "the classes' shares add up to the total: %d of %d" % (shares, j["rounding_bytes"]))
    names = [l["name"] for l in j["locks"]]
    for want in ("heap arena", "metadata pools", "heap profiler", "depot %d" % c["class"],
                 "slab %d" % c["class"]):  # 3 MB allocated: the profiler samples some
        check(want in names, "a lock row %r in %s" % (want, names))
    check(all(l["acquisitions"] >= l["contended"] for l in j["locks"]), "contended <= taken")


def test_contention():
    """Threads hammering one object cache contend for its depot lock: on a busy machine a run
    may happen to overlap little, so up to three runs (each under a second)."""
    for attempt in range(3):
        j = exit_json("--contend", "4", "2000000", options=",mag_rounds=1")
        rows = [l for l in j["locks"] if l["name"].startswith("cache ")]
        check(rows, "object-cache lock rows in %s" % j["locks"])
        if any(l["contended"] > 0 and l["wait_ns"] > 0 for l in rows):
            break
    check(any(l["contended"] > 0 and l["wait_ns"] > 0 for l in rows),
          "the hammered cache's locks were contended: %s" % rows)
    # Every thread's objects are counted, summed over its slot and folded in at its exit:
    # 4 threads x 977 batches of 2048 (tools/alloc_probe.c), all given back.
    cache = [c for c in j["object_caches"] if c["name"] == "contended"]
    want = 4 * 977 * 2048
    check(len(cache) == 1 and cache[0]["allocs"] == want and cache[0]["frees"] == want
          and cache[0]["live_bytes"] == 0, "the cache's allocs and frees, %d each: %s" %
          (want, cache))
    check(cache[0]["size"] == 64 and cache[0]["rounding_bytes"] == want * 8,
          "56-byte objects in 64-byte strides lose 8 bytes each: %s" % cache)
    r = subprocess.run([PROBE, "--contend", "4", "2000000"], capture_output=True, text=True,
                       env=dict(os.environ, LD_PRELOAD=LIBRARY,
                                MAGPIE_OPTIONS="stats=text,mag_rounds=1"), timeout=50)
    check(r.returncode == 0 and re.search(r"^  (busiest|most contended)", r.stderr, re.M),
          "the text report", r)


def test_malloc_info():
    import xml.etree.ElementTree as ET
    r = subprocess.run([PROBE, "--malloc-info"], capture_output=True, text=True, timeout=50,
                       env=dict(os.environ, LD_PRELOAD=LIBRARY))
    check(r.returncode == 0, "malloc_info ran", r)
    root = ET.fromstring(r.stdout)
    check(root.tag == "malloc" and root.get("version") == "1", "<malloc version=\"1\">", r)
    heap = root.find("heap")
    check(heap is not None and heap.get("nr") == "0" and heap.find("sizes") is not None,
          "<heap nr=\"0\"><sizes>", r)
    for size in heap.find("sizes"):
        check(size.tag == "size" and all(size.get(a, "").isdigit()
                                         for a in ("from", "to", "total", "count")), "<size>", r)
    types = {(e.tag, e.get("type")) for e in root}
    for want in (("total", "fast"), ("total", "rest"), ("total", "mmap"), ("system", "current"),
                 ("system", "max"), ("aspace", "total")):
        check(want in types, "%s type=%s in <malloc>" % want, r)


def skip(why):
    print("SKIPPED: " + why)
    shutil.rmtree(TMPDIR, ignore_errors=True)
    sys.exit(77)


def start_contender(ms, threads=4):
    """The probe's threads hammering one object cache and one size class for ms ms, with
    magazines of one round (every other operation a depot trade) and the area published every
    100 ms; returns once it has published."""
    p = start_probe("--contend-for", str(threads), str(ms), options="publish_ms=100,mag_rounds=1")
    read_live(p.pid)
    return p


def top_frames(text):
    """The frames `magpie top` printed: lists of lines, each list from a title line on."""
    frames = []
    for line in text.splitlines():
        if line.startswith("magpie top - pid "):
            frames.append([])
        if frames:
            frames[-1].append(line.rstrip())
    return frames


def rate(text):
    """A rate as top prints it ("-", "7", "2.5", "12.3k", "4.1M") as a number; None for "-"."""
    if text == "-":
        return None
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1], 1)
    return float(text.rstrip("kMG")) * scale


CLASS_ROW = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+ \S+)\s+(\S+ \S+)\s+(\S+)\s+(\S+)"
                       r"\s+(\d+)\s+(\S+)\s+(class \d+|cache .+)$")
LOCK_ROW = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S.*)$")


def top_tables(frame):
    """A frame's cache rows (dicts) and lock rows (dicts), checking the frame's fixed lines."""
    text = "\n".join(frame)
    for want in (r"^memory: RSS \d", r"   live \d", r"   cached \d", r"   mapped \d",
                 r"   huge pages \d[^(]*\(\d+\.\d%\)", r"^totals: allocs [\d,]+ \(\S+/s\)",
                 r"frees [\d,]+ \(\S+/s\)", r"misses [\d,]+ \(\S+/s\)",
                 r"^CACHES by \S+", r"^\s+SIZE\s+ALLOCS/S\s+FREES/S\s+LIVE\s+CACHED\s+MISSES/S"
                 r"\s+TRADES/S\s+SLABS\s+FILL\s+NAME$", r"^LOCKS by \S+",
                 r"^ACQUISITIONS/S\s+CONTENDED/S\s+WAIT MS/S\s+LOCK$"):
        check(re.search(want, text, re.M), "%r in the frame:\n%s" % (want, text))
    at = frame.index([l for l in frame if l.startswith("CACHES by")][0]) + 2
    classes = []
    while at < len(frame) and frame[at]:
        m = CLASS_ROW.match(frame[at])
        check(m, "a cache row: %r" % frame[at])
        classes.append({"size": int(m[1]), "allocs": rate(m[2]), "frees": rate(m[3]),
                        "misses": rate(m[6]), "trades": rate(m[7]), "name": m[10]})
        at += 1
    at = frame.index([l for l in frame if l.startswith("LOCKS by")][0]) + 2
    locks = []
    while at < len(frame) and frame[at] and not frame[at].startswith("keys:"):
        m = LOCK_ROW.match(frame[at])
        check(m, "a lock row: %r" % frame[at])
        locks.append({"acquisitions": rate(m[1]), "contended": rate(m[2]),
                      "wait_ms": None if m[3] == "-" else float(m[3]), "name": m[4]})
        at += 1
    return classes, locks


def contended_top(pid, *args):
    """`magpie top --batch 3` of the contending probe: its last frame's tables, once a lock
    shows contention (up to three tries: on a busy machine an interval may see none)."""
    for attempt in range(3):
        r = magpie("top", "--batch", "3", "--interval", "400", *args, str(pid), expect=0)
        check("\x1b" not in r.stdout, "no escape sequences in batch output", r)
        frames = top_frames(r.stdout)
        check(len(frames) == 3, "3 frames", r)
        classes, locks = top_tables(frames[-1])
        if any(l["contended"] for l in locks):
            return frames, classes, locks
    check(False, "a lock with contended/s > 0 in:\n%s" % "\n".join(frames[-1]))


def test_top_batch():
    p = start_contender(12000)
    try:
        frames, classes, locks = contended_top(p.pid)
        first, _ = top_tables(frames[0])
        check(all(c["allocs"] is None for c in first), "first frame: rates unknown")
        check(re.match(r"magpie top - pid %d \(magpie_alloc_pr\) - \d+ threads" % p.pid,
                       frames[-1][0]), "title line: %s" % frames[-1][0])
        check(frames[-1][1].startswith("memory: RSS ") and frames[-1][4].startswith(
            "CACHES by allocs/s ("), "memory line, default sort: %s" % frames[-1])
        block = [c for c in classes if c["size"] >= 96 and c["name"].startswith("class ")]
        check(block and block[0]["allocs"] > 0 and block[0]["frees"] > 0,
              "the class of the probe's 96-byte blocks moves: %s" % classes)
        allocs = [c["allocs"] for c in classes]
        check(allocs == sorted(allocs, reverse=True), "sorted by allocs/s: %s" % allocs)
        cache = [c for c in classes if c["name"] == "cache contended"]
        check(cache and cache[0]["misses"] > 0 and cache[0]["trades"] > 0,
              "the hammered cache trades with its depot: %s" % classes)
        check(all(l["acquisitions"] >= l["contended"] for l in locks), "contended <= taken")
        contended = [l["contended"] for l in locks]
        check(contended == sorted(contended, reverse=True), "locks by contended/s: %s" % locks)
        r = magpie("top", "--batch", "2", "--interval", "300", "--sort", "m", "--sort", "w",
                   str(p.pid), expect=0)
        last = top_frames(r.stdout)[-1]
        check(last[4].startswith("CACHES by misses/s (") and "LOCKS by wait ms/s (" in r.stdout,
              "--sort m and --sort w", r)
        classes, locks = top_tables(last)
        misses, waits = [c["misses"] for c in classes], [l["wait_ms"] for l in locks]
        check(misses == sorted(misses, reverse=True) and waits == sorted(waits, reverse=True),
              "sorted by misses/s and wait ms/s", r)
    finally:
        p.kill()
        p.wait()


def test_top_exit():
    p = start_contender(1500, threads=2)
    try:
        r = magpie("top", "--batch", "100", "--interval", "200", str(p.pid), expect=1)
        check("process %d exited" % p.pid in r.stderr and top_frames(r.stdout),
              "frames, then says the process exited", r)
    finally:
        p.kill()
        p.wait()
    q = subprocess.Popen(["sleep", "20"], env={k: v for k, v in os.environ.items()
                                                if k != "LD_PRELOAD"})
    try:
        r = magpie("top", "--batch", "1", str(q.pid), expect=125)
        check("no magpie statistics area" in r.stderr and not r.stdout, "says there is none", r)
    finally:
        q.kill()
        q.wait()
    magpie("top", expect=2)
    check("magpie top PID" in magpie("top", "--help", expect=0).stdout, "top --help")
    magpie("top", "--sort", "x", "1", expect=2)
    magpie("top", "--batch", "0", "1", expect=2)


def test_top_tmux():
    """`magpie top` on a terminal: tmux runs it in a 160x50 pane; capture-pane shows what it
    drew. Then a sort key, a resize (SIGWINCH), and 'q', after which the shell's terminal must be
    back as it was."""
    if not shutil.which("tmux"):
        skip("tmux is not installed")
    p = start_contender(14000)
    server = ["tmux", "-L", "magpie-test-%d" % os.getpid(), "-f", "/dev/null"]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MAGPIE_OPTIONS", "TMUX")}
    shell = ("stty -a | grep -o -- '-*icanon' | sed 's/^/before: /'; %s top --interval 500 %d; "
             "echo magpie-top-exit=$?; stty -a | grep -o -- '-*icanon' | sed 's/^/after: /'; "
             "sleep 30" % (MAGPIE, p.pid))

    def screen():
        return subprocess.run(server + ["capture-pane", "-p", "-t", "top"], capture_output=True,
                              text=True, env=env, timeout=10).stdout

    def wait_for(test, what, seconds=10):
        end = time.monotonic() + seconds
        while True:
            text = screen()
            if test(text):
                return text
            check(time.monotonic() < end, "%s; the screen:\n%s" % (what, text))
            time.sleep(0.2)

    def contended(text):
        frames = top_frames(text)
        if not frames or not any(l.startswith("keys:") for l in frames[0]):
            return False
        return any(l["contended"] for l in top_tables(frames[0])[1])

    try:
        r = subprocess.run(server + ["new-session", "-d", "-s", "top", "-x", "160", "-y", "50",
                                     shell], env=env, capture_output=True, text=True, timeout=10)
        check(r.returncode == 0, "tmux started", r)
        text = wait_for(contended, "two refreshes, a lock with contended/s > 0")
        frame = top_frames(text)[0]
        classes, locks = top_tables(frame)
        check("\nCACHES by allocs/s (" in text and classes, "a cache table:\n%s" % text)
        check(not any(l.startswith("before:") for l in frame), "on the alternate screen")
        subprocess.run(server + ["send-keys", "-t", "top", "m"], env=env, timeout=10)
        wait_for(lambda t: "CACHES by misses/s" in t, "'m' sorts by misses/s", 5)
        subprocess.run(server + ["resize-window", "-t", "top", "-x", "100", "-y", "24"], env=env,
                       timeout=10)
        text = wait_for(lambda t: any(l.startswith("keys:") and len(l) == 99
                                      for l in t.splitlines()),
                        "redrawn for 100 columns: lines cut at 99", 5)
        check(len(text.splitlines()) <= 24, "24 rows at most:\n%s" % text)
        subprocess.run(server + ["send-keys", "-t", "top", "q"], env=env, timeout=10)
        text = wait_for(lambda t: "after:" in t, "'q' quits", 5)
        check("magpie-top-exit=0" in text, "exit status 0:\n%s" % text)
        check("before: icanon" in text and "after: icanon" in text and "CACHES" not in text,
              "the terminal is given back as it was (canonical mode, main screen):\n%s" % text)
    finally:
        subprocess.run(server + ["kill-server"], env=env, capture_output=True, timeout=10)
        p.kill()
        p.wait()


def test_top_redis():
    """A real server: redis-server (io-threads 2) under redis-benchmark, watched by top."""
    if not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        skip("redis-server or redis-benchmark is not installed")
    work = tempfile.mkdtemp(prefix="magpie-top-redis.")
    sock = os.path.join(work, "sock")
    env = dict(os.environ, LD_PRELOAD=LIBRARY, MAGPIE_OPTIONS="publish_ms=100")
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                               "--appendonly", "no", "--io-threads", "2", "--dir", work],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench = None
    try:
        end = time.monotonic() + 10
        while not os.path.exists(sock):
            check(time.monotonic() < end and server.poll() is None, "redis-server started")
            time.sleep(0.05)
        bench = subprocess.Popen(["redis-benchmark", "-s", sock, "-n", "10000000", "-c", "20",
                                  "-d", "100", "-t", "set,get,lpush,lpop", "-q"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        read_live(server.pid)
        r = magpie("top", "--batch", "2", "--interval", "700", str(server.pid), expect=0)
        frames = top_frames(r.stdout)
        check(len(frames) == 2 and "(redis-server)" in frames[-1][0], "2 frames of redis", r)
        classes, locks = top_tables(frames[-1])
        check(any(c["allocs"] and c["frees"] for c in classes),
              "a class with allocs/s and frees/s > 0 under the benchmark", r)
        check(any(l["acquisitions"] for l in locks), "locks taken", r)
    finally:
        if bench:
            bench.kill()
            bench.wait()
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


class Skip(Exception):
    """A case that cannot run here: it exits 77 after a SKIPPED line."""


def main(cases=None):
    """Runs case CASE of cases (a module's globals; this module's by default)."""
    test = (cases or globals()).get("test_" + CASE)
    if not test:
        print("%s: no case named %s" % (os.path.basename(sys.argv[0]), CASE), file=sys.stderr)
        return 2
    try:
        test()
    except Skip as e:
        print("SKIPPED: %s: %s" % (CASE, e))
        return 77
    except Failure as e:
        print("FAIL %s: %s" % (CASE, e), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(TMPDIR, ignore_errors=True)
    print("PASS %s" % CASE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
