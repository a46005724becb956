#!/usr/bin/env python3
"""Writes the man pages magpie(1) and magpie(3) from their templates (docs/man/*.in) and from
README.md, the one source of the options table, so the two cannot drift; with --check, checks
that README.md's options table, src/core/options.c's table and a generated page name the same
options, and that groff renders the page without a warning.

usage: gen-man.py --version V --readme README.md --out DIR TEMPLATE...
       gen-man.py --check --readme README.md --options-c src/core/options.c PAGE...

A template is roff with placeholders on lines of their own: @OPTIONS@ becomes README.md's
"## Options" section (its text, then one tagged paragraph per table row: name, default,
meaning), @DEBUG@ the "## Debug mode" section; @VERSION@ anywhere becomes the version. Markdown
handled: paragraphs, `code` (bold), [text](link) (the text), tables, ``` blocks; anything else
passes through as text with roff's special characters escaped.
"""
import argparse
import os
import re
import subprocess
import sys


def section(readme, title):
    """The lines of README.md's "## title" section, without its heading."""
    lines = open(readme, encoding="utf-8").read().splitlines()
    try:
        start = lines.index("## " + title) + 1
    except ValueError:
        sys.exit("gen-man: README.md has no '## %s' section" % title)
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def table_cells(line):
    """The cells of a markdown table row; '\\|' is a '|' inside a cell."""
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def options_table(lines):
    """[(name, default, meaning)] from the section's table, header and rule skipped."""
    rows = [table_cells(l) for l in lines if l.startswith("|")]
    rows = [r for r in rows[1:] if not re.fullmatch(r"[-: |]*", "".join(r))]
    return [(r[0].strip("`"), r[1], r[2]) for r in rows]


def roff_text(text):
    """Markdown inline text to roff: escapes, `code` in bold, links reduced to their text."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"`([^`]*)`", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR", text)
    return text


def roff_line(text):
    """A text line roff does not take for a request (leading '.' or ''')."""
    return "\\&" + text if text[:1] in (".", "'") else text


def roff_section(lines):
    """A README section as roff: paragraphs, code blocks, the options table as tagged paragraphs."""
    out, para, in_code = [], [], False

    def flush():
        if para:
            out.extend([".PP", roff_line(roff_text(" ".join(para)))])
            para.clear()

    for line in lines:
        if line.startswith("```"):
            flush()
            out.extend([".PP", ".nf", ".RS 4"] if not in_code else [".RE", ".fi"])
            in_code = not in_code
        elif in_code:
            out.append(roff_line(line.replace("\\", "\\e")))
        elif line.startswith("|"):
            flush()
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
    flush()
    rows = options_table(lines)
    for name, default, meaning in rows:
        out.extend([".TP", "\\fB%s\\fR (default: %s)" % (name, roff_text(default)),
                    roff_line(roff_text(meaning))])
    return out


def generate(args):
    parts = {"@OPTIONS@": roff_section(section(args.readme, "Options")),
             "@DEBUG@": roff_section(section(args.readme, "Debug mode"))}
    os.makedirs(args.out, exist_ok=True)
    for template in args.pages:
        out = []
        for line in open(template, encoding="utf-8").read().splitlines():
            out.extend(parts.get(line.strip(), [line.replace("@VERSION@", args.version)]))
        name = os.path.basename(template)[:-len(".in")]
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")


def options_c_names(path):
    text = open(path, encoding="utf-8").read()
    table = re.search(r"opt_table\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    if not table:
        sys.exit("gen-man: no opt_table in %s" % path)
    return re.findall(r'\{\s*"(\w+)"\s*,', table.group(1))


def check(args):
    problems = []
    readme = [name for name, _, _ in options_table(section(args.readme, "Options"))]
    source = options_c_names(args.options_c)
    if sorted(readme) != sorted(source):
        problems.append("README.md's options table %s and options.c's table %s differ: only in "
                        "README.md %s, only in options.c %s" % (
                            len(readme), len(source), sorted(set(readme) - set(source)),
                            sorted(set(source) - set(readme))))
    for page in args.pages:
        text = open(page, encoding="utf-8").read()
        if "@" + "OPTIONS@" in text or "@VERSION@" in text:
            problems.append("%s: a placeholder was left" % page)
        if os.path.basename(page) == "magpie.3":
            listed = re.findall(r"^\.TP\n\\fB(\w+)\\fR \(default:", text, re.M)
            if listed != readme:
                problems.append("%s lists the options %s, README.md %s" % (page, listed, readme))
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page],
                           capture_output=True, text=True)
        if r.returncode != 0 or r.stderr:
            problems.append("%s: groff -ww: status %d\n%s" % (page, r.returncode, r.stderr))
    for p in problems:
        print("gen-man: " + p, file=sys.stderr)
    if not problems:
        print("gen-man: %d options agree in README.md, options.c and %s; groff renders them "
              "without warnings" % (len(readme), ", ".join(args.pages)))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--version")
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--options-c")
    ap.add_argument("pages", nargs="+")
    args = ap.parse_args()
    if args.check:
        return check(args)
    generate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
