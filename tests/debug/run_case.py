#!/usr/bin/python3
"""Runs one debug-mode case and checks its outcome.

    run_case.py [options] -- PROGRAM ARGS...

Options:
  --env NAME=VALUE          set for the program only (LD_PRELOAD, MAGPIE_DEBUG): this driver
                            itself runs with the plain environment; repeatable
Checks:
  --signal ABRT|SEGV|none   how the program must end (none: exit status 0)
  --expect TEXT             the report contains TEXT (case-insensitive); repeatable
  --stdout TEXT             the program's stdout contains TEXT
  --reject TEXT             the report does not contain TEXT
  --count TEXT=N            TEXT occurs exactly N times in the report
  --first-frame TEXT        the first frame under the report's first "stack of the call:"
                            contains TEXT (magpie's own frames are left out)
  --address                 the report names the address the program announced with
                            "misuse: KIND ADDRESS" (every announced address, whole token)
  --fault                   the program's SIGSEGV handler wrote "misuse: fault at ADDRESS" on
                            stderr with the announced address: the fault is the one expected
  --log PATTERN             the report is read from this file ("%p": the child's pid), and
                            stderr must hold no report
  --leak FUNC=COUNT,BYTES   a leak group whose stack names FUNC has COUNT blocks, BYTES bytes
  --no-leak FUNC            no leak group's stack names FUNC
The child is killed after 20 s (a deadlock fails the test rather than hanging it).
"""
import argparse
import os
import re
import signal
import subprocess
import sys

TIMEOUT_S = 20


def leak_groups(report):
    """[(count, bytes, text of the group's lines)] from the leak report."""
    groups = []
    current = None
    for line in report.splitlines():
        m = re.match(r"magpie: (?:direct |indirect )?leak of (\d+) blocks?, (\d+) bytes", line)
        if m:
            current = [int(m.group(1)), int(m.group(2)), line + "\n"]
            groups.append(current)
        elif line.startswith("magpie:"):
            current = None
        elif current is not None:
            current[2] += line + "\n"
    return groups


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--signal", default="ABRT")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--reject", action="append", default=[])
    ap.add_argument("--stdout", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--count", action="append", default=[])
    ap.add_argument("--first-frame")
    ap.add_argument("--address", action="store_true")
    ap.add_argument("--fault", action="store_true")
    ap.add_argument("--log")
    ap.add_argument("--leak", action="append", default=[])
    ap.add_argument("--no-leak", action="append", default=[])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    env = dict(os.environ)
    for spec in a.env:
        name, value = spec.split("=", 1)
        env[name] = value
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: __import__("resource").setrlimit(
                                __import__("resource").RLIMIT_CORE, (0, 0)))
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        print("FAIL: %s did not finish in %d s (deadlock?)" % (" ".join(cmd), TIMEOUT_S))
        return 1
    out = out.decode(errors="replace")
    err = err.decode(errors="replace")
    report = err
    failures = []
    if a.log:
        path = a.log.replace("%p", str(proc.pid))
        try:
            with open(path, errors="replace") as f:
                report = f.read()
            os.unlink(path)
        except OSError as e:
            failures.append("no log file %s: %s" % (path, e))
            report = ""
        if "magpie: " in err:
            failures.append("stderr holds a report although log= was given")
    print("---- command: %s\n---- stdout\n%s---- report%s\n%s----" %
          (" ".join(cmd), out, " (log)" if a.log else " (stderr)", report))
    if a.log:
        print("---- stderr\n%s----" % err)

    rc = proc.returncode
    if a.signal == "none":
        if rc != 0:
            failures.append("exit status %d, wanted 0" % rc)
    else:
        want = getattr(signal, "SIG" + a.signal)
        if rc != -want:
            failures.append("ended with %s, wanted death by SIG%s" %
                            ("signal %d" % -rc if rc < 0 else "exit status %d" % rc, a.signal))
    low = report.lower()
    for text in a.expect:
        if text.lower() not in low:
            failures.append("report does not mention %r" % text)
    for text in a.stdout:
        if text not in out:
            failures.append("stdout does not contain %r" % text)
    for text in a.reject:
        if text.lower() in low:
            failures.append("report mentions %r" % text)
    for spec in a.count:
        text, n = spec.rsplit("=", 1)
        if low.count(text.lower()) != int(n):
            failures.append("%r occurs %d times, wanted %s" % (text, low.count(text.lower()), n))
    if a.first_frame:
        m = re.search(r"stack of the call:\n\s*#0 (.*)", report)
        if not m or a.first_frame not in m.group(1):
            failures.append("the call's stack does not start at %r: %r" %
                            (a.first_frame, m.group(1) if m else None))
    if a.address:
        addresses = re.findall(r"^misuse: \S+ (0x[0-9a-f]+)", out, re.M)
        if not addresses:
            failures.append("the program announced no address")
        for addr in addresses:
            if not re.search(r"(?<![0-9a-zA-Z])%s(?![0-9a-fA-F])" % addr, report, re.I):
                failures.append("report does not name the address %s" % addr)
    if a.fault:
        announced = re.findall(r"^misuse: \S+ (0x[0-9a-f]+)", out, re.M)
        faults = re.findall(r"^misuse: fault at (0x[0-9a-f]+)", err, re.M)
        if not announced or not faults:
            failures.append("no announced address, or no fault reported by the program")
        elif int(faults[0], 16) != int(announced[0], 16):
            failures.append("the fault was at %s, not at the announced %s" %
                            (faults[0], announced[0]))
    groups = leak_groups(report)
    for spec in a.leak:
        func, rest = spec.split("=")
        count, nbytes = (int(x) for x in rest.split(","))
        mine = [g for g in groups if re.search(r"\b%s\+" % re.escape(func), g[2])]
        if len(mine) != 1:
            failures.append("%d leak groups name %s, wanted 1" % (len(mine), func))
        elif (mine[0][0], mine[0][1]) != (count, nbytes):
            failures.append("leak group of %s: %d blocks, %d bytes; wanted %d, %d" %
                            (func, mine[0][0], mine[0][1], count, nbytes))
    for func in a.no_leak:
        if any(re.search(r"\b%s\+" % re.escape(func), g[2]) for g in groups):
            failures.append("a leak group names %s" % func)
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
