#!/usr/bin/env python3
"""Test of bench/svgchart.py (ctest bench_svgchart): draws a committed demo result
(tests/data/bench-demo-20261123-001739.json, 4 workloads, glibc and magpie) with the idle row marked
memory_only, and checks that the SVG parses as XML and has a bar with a whisker for magpie in
every row of both panels but idle's time, and a band of glibc's spread for each bar.

  check_svgchart.py"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "{http://www.w3.org/2000/svg}"


def main():
    with open(os.path.join(HERE, "..", "tests", "data", "bench-demo-20261123-001739.json")) as f:
        data = json.load(f)
    for w in data["workloads"]:
        w["memory_only"] = w["group"] == "idle"
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.svg")
        with open(src, "w") as f:
            json.dump(data, f)
        subprocess.run([sys.executable, os.path.join(HERE, "svgchart.py"), src, dst], check=True)
        root = ET.parse(dst).getroot()
    bars = [(r.get("data-row"), r.get("data-allocator")) for r in root.iter(NS + "rect")
            if r.get("class") == "bar"]
    want = [(w, "magpie") for w in ("larson-t8", "prodcons-t2", "python")] + \
        [(w, "magpie") for w in ("larson-t8", "prodcons-t2", "idle-t256", "python")]
    whiskers = [e for e in root.iter(NS + "line") if e.get("class") == "whisker"]
    bands = [r for r in root.iter(NS + "rect") if r.get("class") == "glibc-spread"]
    failures = []
    if bars != want:
        failures.append("bars %s, wanted %s" % (bars, want))
    if len(whiskers) != len(want) or len(bands) != len(want):
        failures.append("%d whiskers and %d glibc bands, wanted %d" %
                        (len(whiskers), len(bands), len(want)))
    texts = [t.text for t in root.iter(NS + "text")]
    if "idle-t256 (memory only)" not in texts:
        failures.append("idle's time label does not say it is memory only: %s" % texts)
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("PASS: %d bars, whiskers and glibc bands" % len(bars))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
