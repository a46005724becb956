#!/usr/bin/env python3
"""Fails when a file of src/ includes a header of, or calls a function defined in, a layer above
its own. The layers, bottom to top, are the folders of src/ (src/README.md):

    platform < diag < core < debug < front

A file may use its own layer and the layers below. Includes are read from the sources; calls
from the object files of a build (`nm`), so a call through a declaration written by hand is
caught too. Usage: check-layers.py SRC_DIR [OBJECT...]: the objects of a build of src/, each
with its layer's folder in its path (.../src/core/mag.c.o); without them, only includes are
checked. `make test` runs it on the library's objects (ctest: layers).

It also keeps a module's private header private: NAME_impl.h (mag_impl.h, debug_impl.h,
os_impl.h, stats_impl.h) may be included only by the files of its own folder whose names start
with NAME (mag*.c, debug*.c, ...).
"""
import os
import re
import subprocess
import sys

LAYERS = ["platform", "diag", "core", "debug", "front"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_files(src):
    """{file name: layer} for every source and header under src/<layer>/."""
    found = {}
    for layer in LAYERS:
        for name in sorted(os.listdir(os.path.join(src, layer))):
            found[name] = layer
    return found


def check_includes(src, layer_of):
    problems = []
    for name, layer in sorted(layer_of.items()):
        text = open(os.path.join(src, layer, name), encoding="utf-8").read()
        for header in INCLUDE.findall(text):
            target = layer_of.get(os.path.basename(header))
            if target and LAYERS.index(target) > LAYERS.index(layer):
                problems.append(f"{layer}/{name} includes {target}/{header}")
            base = os.path.basename(header)
            if target and base.endswith("_impl.h") and (
                    target != layer or not name.startswith(base[:-len("_impl.h")])):
                problems.append(f"{layer}/{name} includes {target}/{header}, private to "
                                f"{target}/{base[:-len('_impl.h')]}*")
    return problems


def nm(path, *flags):
    out = subprocess.run(["nm", *flags, path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def check_calls(objects):
    """A symbol's layer is that of the object defining it."""
    by_object = {}
    for path in objects:
        parts = os.path.normpath(path).split(os.sep)
        layer = next((p for p in reversed(parts) if p in LAYERS), None)
        if layer is None:
            sys.exit(f"check-layers: {path} lies in no layer's folder")
        by_object[(layer, os.path.basename(path))] = path
    defined = {}
    for (layer, name), path in by_object.items():
        for sym in nm(path, "--defined-only", "--extern-only"):
            defined[sym] = (layer, name)
    problems = []
    for (layer, name), path in by_object.items():
        for sym in nm(path, "--undefined-only"):
            owner = defined.get(sym)
            if owner and LAYERS.index(owner[0]) > LAYERS.index(layer):
                problems.append(f"{layer}/{name} calls {sym} of {owner[0]}/{owner[1]}")
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    objects = [o for arg in sys.argv[2:] for o in arg.split(";") if o]  # CMake passes a list
    layer_of = layer_files(src)
    problems = check_includes(src, layer_of)
    if objects:
        problems += check_calls(objects)
    for p in problems:
        print(f"check-layers: {p}" + ("" if "private to" in p else ": a layer above its own"))
    print(f"check-layers: {len(layer_of)} files' includes, {len(objects)} objects' calls: "
          f"{len(problems)} uses against the rules")
    sys.exit(1 if problems else 0)


main()
