#!/usr/bin/env python3
"""term2svg: draws a terminal's text (e.g. `tmux capture-pane -p`) as an SVG picture.

usage: term2svg.py [--title TEXT] < SCREEN.txt > SCREEN.svg

Each line becomes one <text> element in a monospace font on a dark background, at a fixed
cell size, so columns line up as they did on the terminal; trailing blank lines are dropped.
Lines that start a `magpie top` section (the title, the table names and column headings) are
drawn bold. The picture has no script or external reference: any SVG viewer, and GitHub's
Markdown, shows it. Used for docs/img/top.svg (docs/observability.md says how it was made).
"""
import argparse
import re
import sys
from xml.sax.saxutils import escape

CELL_W, CELL_H, PAD = 7.8, 16, 12  # px: a 13 px monospace cell, and the margin
BOLD = re.compile(r"^(magpie top - |CACHES by |LOCKS by |\s+SIZE\s+ALLOCS/S|ACQUISITIONS/S)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--title", default="magpie top", help="the picture's <title>")
    args = ap.parse_args()
    lines = [l.rstrip() for l in sys.stdin.read().expandtabs().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    cols = max((len(l) for l in lines), default=1)
    width = int(2 * PAD + cols * CELL_W)
    height = int(2 * PAD + len(lines) * CELL_H)
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
        % (width, height, width, height),
        "<title>%s</title>" % escape(args.title),
        '<rect width="100%" height="100%" rx="6" fill="#1e1e1e"/>',
        '<g font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="13px" '
        'fill="#d4d4d4" xml:space="preserve">',
    ]
    for i, line in enumerate(lines):
        if not line:
            continue
        weight = ' font-weight="bold" fill="#ffffff"' if BOLD.match(line) else ""
        out.append('<text x="%d" y="%.0f" textLength="%.1f"%s>%s</text>'
                   % (PAD, PAD + (i + 0.8) * CELL_H, len(line) * CELL_W, weight, escape(line)))
    out += ["</g>", "</svg>"]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
