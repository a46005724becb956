#!/usr/bin/env python3
"""Runs memcheck_bugs under valgrind's memcheck and checks that memcheck found each of its bugs,
with the right size, in the function that commits it, and nothing else.

Usage: memcheck_check.py MODE PROGRAM
  magpie    PROGRAM is linked with libmagpie.so and run with
            --soname-synonyms=somalloc=nouserintercepts: magpie allocates everything; every
            block must have been described to memcheck by magpie (memcheck_served in the
            allocation stack), and the error count must be exactly the bugs'.
  static    PROGRAM is linked statically (-static, libmagpie.a): valgrind cannot replace its
            malloc, magpie allocates. Static glibc draws reports of its own (its SSE string
            functions read past the end of strings, its start-up blocks look lost, as they do
            under valgrind's own malloc), so the total is not checked.
  replaced  PROGRAM is linked with libmagpie.so and run as valgrind runs it by default: memcheck
            replaces malloc (its own in the allocation stacks), magpie's object caches stay
            magpie's and are still checked.
Exits 77 (SKIPPED) without valgrind.
"""
import re
import shutil
import subprocess
import sys

# (function committing the bug, memcheck's error kind, what it says of the address or the leak)
MALLOC_BUGS = [
    ("overrun_malloc", "Invalid write of size 1", "0 bytes after a (recently re-allocated )?block of size 24"),
    ("use_after_free_malloc", "Invalid read of size 1", None),
    ("uninitialised_malloc", "Conditional jump or move depends on uninitialised value", None),
    ("leak_malloc", "100 bytes in 1 blocks are definitely lost", None),
]
OBJECT_BUGS = [
    ("overrun_object", "Invalid write of size 1", "0 bytes after a (recently re-allocated )?block of size 56"),
    ("use_after_free_object", "Invalid read of size 1", None),
    ("leak_object", "88 bytes in 1 blocks are definitely lost", None),
]
# Where the allocation stack of a block shows who described it to memcheck.
BY_MAGPIE = "memcheck_served"
BY_VALGRIND = "vgpreload_memcheck"


def records(log):
    """memcheck's reports: lists of lines, split at its blank '==PID== ' lines."""
    out, cur = [], []
    for line in log.splitlines():
        m = re.match(r"==\d+== ?(.*)$", line)
        if not m:
            continue
        text = m.group(1)
        if text.strip():
            cur.append(text)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def first_frame_of(record, function):
    """The line of the report's first stack (the access, or the leaked block's allocation) that
    names function, or ''. For an access that is the top frame; a leak's stack passes through
    malloc's own frames first."""
    for line in record[1:]:
        if not line.lstrip().startswith(("at ", "by ")):
            break
        if function in line:
            return line
        if "Conditional" in record[0] or "Invalid" in record[0]:
            break  # the access's top frame must be the function itself
    return ""


def main():
    mode, program = sys.argv[1], sys.argv[2]
    valgrind = shutil.which("valgrind")
    if not valgrind:
        print("SKIPPED: valgrind is not installed")
        return 77
    args = [valgrind, "--leak-check=full", "--num-callers=20"]
    if mode == "magpie":
        args.append("--soname-synonyms=somalloc=nouserintercepts")
    run = subprocess.run(args + [program], capture_output=True, text=True, timeout=120)
    log = run.stderr
    failures = []
    if run.returncode != 0:
        failures.append(f"the program exited {run.returncode}")
    recs = records(log)
    expect = [(b, BY_VALGRIND if mode == "replaced" else BY_MAGPIE) for b in MALLOC_BUGS]
    expect += [(b, BY_MAGPIE) for b in OBJECT_BUGS]
    for (function, kind, where), describer in expect:
        found = [r for r in recs if kind in r[0] and function in first_frame_of(r, function)]
        if len(found) != 1:
            failures.append(f"{function}: {len(found)} reports '{kind}', expected 1")
            continue
        text = "\n".join(found[0])
        if where and not re.search(where, text):
            failures.append(f"{function}: the report does not say '{where}'")
        if "Conditional" not in kind and describer not in text:
            failures.append(f"{function}: the block's stack does not show {describer}")
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    if not summary:
        failures.append("no ERROR SUMMARY line")
    elif mode != "static" and int(summary.group(1)) != len(expect):
        failures.append(f"{summary.group(1)} errors reported, expected {len(expect)} (the bugs')")
    if failures:
        print(log)
        for f in failures:
            print("FAILED:", f)
        return 1
    print(f"memcheck ({mode}): {len(expect)} bugs reported as expected; {summary.group(0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
