#!/usr/bin/env python3
"""Draws a bench/run.py results file as an SVG chart with the standard library only (no
matplotlib): two panels, time and peak RSS per workload, each allocator's median as a ratio to
glibc's median (log scale; below 1 is better than glibc), and a whisker from its fastest to its
slowest run (also over glibc's median) and a grey band for glibc's own runs, so that a noisy
row shows as one. Rows whose point is
memory (run.py's memory_only: idle) get no time bar. run.py draws the demo's chart with this,
and any other mode's where matplotlib cannot be imported (chart.py draws those otherwise).

  svgchart.py RESULTS.json OUT.svg"""

import json
import math
import sys
from xml.sax.saxutils import escape

COLOURS = {"glibc": "#888888", "magpie": "#d62728", "jemalloc": "#1f77b4",
           "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e"}
LEFT, RIGHT, TOP, PANEL_H, GAP, BOTTOM = 80, 150, 50, 240, 60, 110
TICKS = [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20]


def panel(out, top, width, title, rows, allocs, cell, key):
    """One panel of bars: ratio to glibc's median of key, per row and allocator."""
    bars = []  # (row index, allocator index, median ratio, lowest, highest)
    bands = []  # (row index, glibc's lowest, highest run over its median)
    for j, w in enumerate(rows):
        g = cell.get((w["name"], "glibc"), {}).get(key)
        if not g or not g["median"] or (key == "time" and w.get("memory_only")):
            continue
        bands.append((j, g["min"] / g["median"], g["max"] / g["median"]))
        for i, a in enumerate(allocs):
            s = cell.get((w["name"], a), {}).get(key)
            if s:
                bars.append((j, i, s["median"] / g["median"], s["min"] / g["median"],
                             s["max"] / g["median"]))
    values = [v for b in bars for v in b[2:]] + [v for b in bands for v in b[1:]] + [1.0]
    lo = math.log10(min(values) / 1.25)
    hi = math.log10(max(values) * 1.25)

    def y(v):
        return top + PANEL_H - (math.log10(v) - lo) / (hi - lo) * PANEL_H

    out.append('<text x="%d" y="%d" font-size="14">%s</text>' % (LEFT, top - 10, escape(title)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>'
               % (LEFT, top, width, PANEL_H))
    for t in TICKS:
        if lo <= math.log10(t) <= hi:
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>'
                       '<text x="%d" y="%.1f" font-size="11" text-anchor="end">%gx</text>'
                       % (LEFT, y(t), LEFT + width, y(t), "#000" if t == 1 else "#ddd",
                          LEFT - 6, y(t) + 4, t))
    slot = width / max(1, len(rows))
    bar_w = slot * 0.8 / max(1, len(allocs))
    for j, low, high in bands:
        out.append('<rect class="glibc-spread" x="%.1f" y="%.1f" width="%.1f" height="%.1f" '
                   'fill="#888" fill-opacity="0.25"><title>glibc runs: %.2f-%.2fx its median'
                   '</title></rect>' % (LEFT + slot * j + slot * 0.05, y(high), slot * 0.9,
                                        max(1.0, y(low) - y(high)), low, high))
    for j, i, med, low, high in bars:
        x = LEFT + slot * j + slot * 0.1 + bar_w * i
        top_y, base_y = sorted((y(med), y(1.0)))
        out.append('<rect class="bar" data-row="%s" data-allocator="%s" x="%.1f" y="%.1f" '
                   'width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.2fx (%.2f-%.2fx)'
                   '</title></rect>'
                   % (escape(rows[j]["name"]), allocs[i], x, top_y, bar_w, base_y - top_y,
                      COLOURS.get(allocs[i], "#555"), escape(rows[j]["name"]), allocs[i],
                      med, low, high))
        cx = x + bar_w / 2
        out.append('<line class="whisker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
                   'stroke="#000"/>' % (cx, y(low), cx, y(high)))
    for j, w in enumerate(rows):
        x = LEFT + slot * (j + 0.5)
        label = w["name"] + (" (memory only)" if key == "time" and w.get("memory_only") else "")
        out.append('<text x="%.1f" y="%d" font-size="11" text-anchor="end" '
                   'transform="rotate(-35 %.1f %d)">%s</text>'
                   % (x, top + PANEL_H + 14, x, top + PANEL_H + 14, escape(label)))
    out.append('<text x="20" y="%.1f" font-size="12" text-anchor="middle" '
               'transform="rotate(-90 20 %.1f)">%s / glibc (lower is better)</text>'
               % (top + PANEL_H / 2, top + PANEL_H / 2, "time" if key == "time" else "peak RSS"))


def draw(data):
    allocs = [a["name"] for a in data["allocators"] if a["name"] != "glibc"]
    cell = {(s["workload"], s["allocator"]): s for s in data["summary"]}
    rows = [w for w in data["workloads"] if (w["name"], "glibc") in cell]
    width = max(480, 70 * len(rows))
    height = TOP + 2 * PANEL_H + GAP + BOTTOM
    total_w = LEFT + width + RIGHT
    m = data["machine"]
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif">' % (total_w, height, total_w, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="13">%s</text>' % (LEFT, escape(
               "magpie bench --%s, %s, %d CPUs (%s), %s: medians of %d runs, whiskers from the "
               "lowest to the highest run" % (data["mode"], m["date"][:16], m["nproc"], m["cpu"],
                                             m["glibc"], data["reps"])))]
    panel(out, TOP + 10, width, "time", rows, allocs, cell, "time")
    panel(out, TOP + 10 + PANEL_H + GAP, width, "peak RSS", rows, allocs, cell, "rss_kib")
    for i, a in enumerate(allocs + ["glibc runs"]):
        ly = TOP + 24 + 20 * i
        out.append('<rect x="%d" y="%d" width="14" height="10" fill="%s"/>'
                   '<text x="%d" y="%d" font-size="12">%s</text>'
                   % (LEFT + width + 16, ly - 9, COLOURS.get(a, "#bbb"), LEFT + width + 36, ly,
                      escape(a)))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    if data["mode"] == "scaling":
        sys.exit("svgchart.py: --scaling results are drawn by bench/scaling.py")
    with open(dst, "w") as f:
        f.write(draw(data))


if __name__ == "__main__":
    main()
