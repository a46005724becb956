"""Draws RSS over time from bench/run.py results as an SVG, with the standard library only (run.py
writes it beside its results, whether or not matplotlib is installed): a panel per row that
recorded samples (server, breathe, breathe-thp), a line per allocator, and the row's live bytes
dashed, as magpie's run saw them (the workloads are deterministic: every allocator's run goes
through the same live bytes, each at its own pace).

  rss_svg.py RESULTS.json OUT.svg"""

import json
import sys
from xml.sax.saxutils import escape

COLOURS = {"glibc": "#888888", "magpie": "#d62728", "jemalloc": "#1f77b4",
           "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e"}
# Variants of one allocator (run.py --magpie-variants: "magpie[hugepages=auto]") share its colour
# and are told apart by their dashes.
DASHES = ["", "6,3", "2,2", "8,3,2,3"]
PANEL_W, PANEL_H, LEFT, RIGHT, TOP, BOTTOM = 760, 260, 70, 190, 30, 40


def colour(alloc):
    return COLOURS.get(alloc.split("[")[0], "#9467bd")


def nice_step(span, ticks=5):
    """A round step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over span."""
    raw = span / ticks if span > 0 else 1.0
    power = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while power > raw:
        power /= 10
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def panel(row, lines, y0):
    """SVG elements of one panel whose top is at y0: lines is {alloc: [[t, live, rss], ...]}."""
    pts = [p for s in lines.values() for p in s]
    t_max = max(p[0] for p in pts) or 1.0
    mib_max = max(max(p[1], p[2]) for p in pts) / 2**20 or 1.0
    t_step, m_step = nice_step(t_max), nice_step(mib_max)
    t_max = t_step * -(-t_max // t_step)
    mib_max = m_step * -(-mib_max // m_step)

    def xy(t, mib):
        return (LEFT + (PANEL_W - LEFT - RIGHT) * t / t_max,
                y0 + TOP + (PANEL_H - TOP - BOTTOM) * (1 - mib / mib_max))

    out = ['<text x="%d" y="%d" font-weight="bold">%s: RSS over time</text>'
           % (LEFT, y0 + 18, escape(row))]
    x0, yb = xy(0, 0)
    x1, yt = xy(t_max, mib_max)
    out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#000"/>'
               % (x0, yt, x1 - x0, yb - yt))
    t = 0.0
    while t <= t_max + 1e-9:
        x, _ = xy(t, 0)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>' % (x, yt, x, yb))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>' % (x, yb + 14, t))
        t += t_step
    m = 0.0
    while m <= mib_max + 1e-9:
        _, y = xy(0, m)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>' % (x0, y, x1, y))
        out.append('<text x="%.1f" y="%.1f" text-anchor="end">%g</text>' % (x0 - 4, y + 4, m))
        m += m_step
    out.append('<text x="%.1f" y="%.1f" text-anchor="middle">seconds</text>'
               % ((x0 + x1) / 2, yb + 30))
    out.append('<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">'
               'MiB</text>' % (x0 - 45, (yt + yb) / 2, x0 - 45, (yt + yb) / 2))
    legend = []
    seen = {}
    for alloc, s in lines.items():
        base = alloc.split("[")[0]
        dash = DASHES[seen.get(base, 0) % len(DASHES)]
        seen[base] = seen.get(base, 0) + 1
        legend.append((alloc + " RSS", colour(alloc), dash))
        path = " ".join("%.1f,%.1f" % xy(p[0], p[2] / 2**20) for p in s)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>'
                   % (path, colour(alloc), ' stroke-dasharray="%s"' % dash if dash else ""))
    who = next((a for a in lines if a.startswith("magpie")),
               max(lines, key=lambda a: len(lines[a])))
    path = " ".join("%.1f,%.1f" % xy(p[0], p[1] / 2**20) for p in lines[who])
    out.append('<polyline points="%s" fill="none" stroke="#000" stroke-width="1" '
               'stroke-dasharray="4,3"/>' % path)
    legend.append(("live bytes (%s)" % who, "#000", "4,3"))
    for i, (label, c, dash) in enumerate(legend):
        y = yt + 8 + 16 * i
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>'
                   % (x1 + 10, y, x1 + 34, y, c,
                      ' stroke-dasharray="%s"' % dash if dash else ""))
        out.append('<text x="%.1f" y="%.1f">%s</text>' % (x1 + 40, y + 4, escape(label)))
    return out


def write_svg(data, dst):
    """Writes the RSS-over-time panels of a results dict to dst; False when it has no samples."""
    series = data.get("series") or {}
    rows = [r for r in series if series[r]]
    if not rows:
        return False
    body = []
    for i, row in enumerate(rows):
        body += panel(row, series[row], i * PANEL_H)
    with open(dst, "w") as f:
        f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
                'font-family="sans-serif" font-size="11">\n<rect width="100%%" height="100%%" '
                'fill="#fff"/>\n%s\n</svg>\n' % (PANEL_W, PANEL_H * len(rows), "\n".join(body)))
    return True


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.exit(0 if write_svg(json.load(f), sys.argv[2]) else 1)
