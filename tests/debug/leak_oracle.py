#!/usr/bin/python3
"""Compares magpie's leak report with LeakSanitizer's for one leak program.

    leak_oracle.py --lsan PROGRAM_LSAN --magpie PROGRAM --preload LIBMAGPIE
                   [--debug FLAGS] [--via-shell] [ARGS...]

PROGRAM_LSAN is the program built with -fsanitize=leak, PROGRAM the same source built plain;
PROGRAM runs with LIBMAGPIE preloaded and MAGPIE_DEBUG=FLAGS (default: default); with
--via-shell, each program is started by /bin/sh -c, which then runs under debug mode too. Each leak
report (every process's, on stderr) becomes a set of (kind, site, blocks, bytes): kind is
direct or indirect, site the first function of the allocation stack whose name starts with
site_ (the program's allocating functions), "other" if none does. The test fails unless the two
sets are equal, magpie lists each report's direct leaks before its indirect ones (as
LeakSanitizer), and LeakSanitizer names site_control (every case leaks it: a run with
no report from magpie cannot pass).
"""
import argparse
import collections
import os
import re
import subprocess
import sys

TIMEOUT_S = 30
SITE = re.compile(r"\b(site_\w+)")


def lsan_leaks(text):
    """{(kind, site): [blocks, bytes]} from LeakSanitizer's reports."""
    leaks = collections.defaultdict(lambda: [0, 0])
    for m in re.finditer(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\) "
                         r"allocated from:\n((?:[ \t]+#\d+ .*\n?)*)", text, re.M):
        site = SITE.search(m.group(4))
        entry = leaks[(m.group(1).lower(), site.group(1) if site else "other")]
        entry[0] += int(m.group(3))
        entry[1] += int(m.group(2))
    return leaks


def magpie_leaks(text):
    """{(kind, site): [blocks, bytes]} from magpie's leak reports."""
    leaks = collections.defaultdict(lambda: [0, 0])
    for m in re.finditer(r"^magpie: (direct|indirect) leak of (\d+) blocks?, (\d+) bytes.*\n"
                         r"((?:[ \t]+#\d+ .*\n?)*)", text, re.M):
        site = SITE.search(m.group(4))
        entry = leaks[(m.group(1), site.group(1) if site else "other")]
        entry[0] += int(m.group(2))
        entry[1] += int(m.group(3))
    return leaks


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=TIMEOUT_S)
    return proc.returncode, proc.stderr.decode(errors="replace")


def show(leaks):
    return "".join("  %-8s %-22s %4d blocks %7d bytes\n" % (k[0], k[1], v[0], v[1])
                   for k, v in sorted(leaks.items())) or "  (none)\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lsan", required=True)
    ap.add_argument("--magpie", required=True)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--debug", default="default")
    ap.add_argument("--via-shell", action="store_true")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "MAGPIE_DEBUG", "MAGPIE_OPTIONS", "LSAN_OPTIONS",
                         "ASAN_OPTIONS")}
    # The slow unwinder: C++ library frames may have no frame pointer, and the site is above
    # them. exitcode=0: the leaks are the point of the program.
    lsan_env = dict(base, LSAN_OPTIONS="fast_unwind_on_malloc=0:exitcode=0")
    magpie_env = dict(base, LD_PRELOAD=a.preload, MAGPIE_DEBUG=a.debug)
    failures = []
    def command(program):
        if not a.via_shell:
            return [program] + a.args
        return ["/bin/sh", "-c", '"$@"; exit $?', "sh", program] + a.args

    try:
        lsan_rc, lsan_text = run(command(a.lsan), lsan_env)
        magpie_rc, magpie_text = run(command(a.magpie), magpie_env)
    except subprocess.TimeoutExpired as e:
        print("FAIL: %s did not finish in %d s" % (" ".join(e.cmd), TIMEOUT_S))
        return 1
    print("---- LeakSanitizer (exit status %d)\n%s---- magpie (exit status %d)\n%s----" %
          (lsan_rc, lsan_text, magpie_rc, magpie_text))
    lsan, mine = lsan_leaks(lsan_text), magpie_leaks(magpie_text)
    print("LeakSanitizer reports:\n%smagpie reports:\n%s" % (show(lsan), show(mine)), end="")
    if lsan_rc != 0 or magpie_rc != 0:
        failures.append("exit statuses %d (LeakSanitizer), %d (magpie), wanted 0" %
                        (lsan_rc, magpie_rc))
    for report in magpie_text.split("magpie: leak report:")[1:]:
        kinds = re.findall(r"^magpie: (direct|indirect) leak of", report, re.M)
        if kinds != sorted(kinds):
            failures.append("magpie lists a direct leak after an indirect one")
    if ("direct", "site_control") not in lsan:
        failures.append("LeakSanitizer did not report site_control: the oracle did not run")
    for key in sorted(set(lsan) | set(mine)):
        if lsan.get(key) != mine.get(key):
            failures.append("%s leaks from %s: LeakSanitizer %s, magpie %s" %
                            (key[0], key[1], lsan.get(key), mine.get(key)))
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
