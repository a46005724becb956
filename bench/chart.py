#!/usr/bin/env python3
"""Draws the chart of a bench/run.py results file: two panels of grouped bars, time and peak RSS
per workload, each allocator as a ratio to glibc (log scale; below 1 is better than glibc), and,
when the results hold them, RSS over time of the server workload (with its live bytes).
(--scaling results are drawn by bench/scaling.py, as SVG.)

  chart.py RESULTS.json OUT.png

run.py calls this with an interpreter that can import matplotlib (Debian: python3-matplotlib)."""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from rss_svg import COLOURS  # noqa: E402  (bench/, the script's own folder)



def draw_series(ax, series):
    """RSS over time of the first server row (else the first row) that recorded samples, one
    line per allocator, and the
    live bytes (the same for every allocator: the workload is deterministic)."""
    row = sorted(series, key=lambda r: (not r.startswith("server"), r))[0]  # breathe: SVG
    live_drawn = False
    for a, pts in series[row].items():
        t = [p[0] for p in pts]
        ax.plot(t, [p[2] / 2**20 for p in pts], label="%s RSS" % a, color=COLOURS.get(a))
        if not live_drawn:
            ax.plot(t, [p[1] / 2**20 for p in pts], label="live bytes", color="black",
                    linestyle="--", linewidth=1)
            live_drawn = True
    ax.set_title("%s: RSS over time (work, then 90%% freed and idle)" % row, fontsize="medium")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=3)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    if data["mode"] == "scaling":
        sys.exit("chart.py: --scaling results are drawn by bench/scaling.py (SVG)")
    allocs = [a["name"] for a in data["allocators"]]
    rows = [w["name"] for w in data["workloads"]]
    cell = {(s["workload"], s["allocator"]): s for s in data["summary"]}
    if "glibc" in allocs:  # rows without a glibc run (objcache) have no ratio to draw
        rows = [r for r in rows if (r, "glibc") in cell]

    def ratio(row, a, key):
        s, g = cell.get((row, a)), cell.get((row, "glibc"))
        if not s or not g or key not in s or key not in g or not g[key]["median"]:
            return None
        return s[key]["median"] / g[key]["median"]

    shown = [a for a in allocs if a != "glibc"] or allocs
    series = data.get("series") or {}
    width_in = max(8, 0.75 * len(rows) + 3)
    if series:
        fig = plt.figure(figsize=(width_in, 13))
        grid = fig.add_gridspec(3, 1, height_ratios=[1, 1, 0.9])
        axes = [fig.add_subplot(grid[0])]
        axes.append(fig.add_subplot(grid[1], sharex=axes[0]))
        draw_series(fig.add_subplot(grid[2]), series)
    else:
        fig, axes = plt.subplots(2, 1, figsize=(width_in, 9), sharex=True)
    width = 0.8 / max(1, len(shown))
    for ax, key, title in ((axes[0], "time", "time"), (axes[1], "rss_kib", "peak RSS")):
        for i, a in enumerate(shown):
            xs, ys = [], []
            for j, row in enumerate(rows):
                r = ratio(row, a, key) if "glibc" in allocs else None
                if r is not None:
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(r)
            ax.bar(xs, ys, width, label=a, color=COLOURS.get(a))
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%gx" % v))
        ax.set_ylabel("%s / glibc (lower is better)" % title)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=len(shown), loc="upper left", fontsize="small")
    axes[1].set_xticks(range(len(rows)))
    axes[1].set_xticklabels(rows, rotation=45, ha="right")
    plt.setp(axes[0].get_xticklabels(), visible=False)
    m = data["machine"]
    fig.suptitle("magpie bench --%s, %s, %d CPUs (%s), %s" %
                 (data["mode"], m["date"][:16], m["nproc"], m["cpu"], m["glibc"]),
                 fontsize="medium")
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    main()
