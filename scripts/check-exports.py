#!/usr/bin/env python3
"""Checks that a built libmagpie.so exports exactly the names it should, and loads no library
but the C library's own (ctest `exports`).

usage: check-exports.py LIBRARY EXPORTS_MAP MAGPIE_H

Expected: the names src/front/exports.map lists one by one (the interposed glibc and C++ names)
and the magpie_* functions include/magpie.h declares (the map exports them by the pattern
magpie_*). Each expected name must be a defined dynamic symbol of LIBRARY, and LIBRARY must
define no other: an internal name leaking out (a missing `static`, a new file built without
-fvisibility=hidden and outside the map) or a public function missing from the map fails.
Its DT_NEEDED entries must all be glibc's (libc, and on older glibc the libraries split from it):
a C program that preloads magpie should load nothing else, neither the C++ runtime
(docs/decisions/cxx-without-libstdcxx.md) nor libgcc_s (docs/decisions/static-libgcc.md).
"""
import re
import subprocess
import sys

library, exports_map, header = sys.argv[1:4]

text = re.sub(r"/\*.*?\*/", "", open(exports_map, encoding="utf-8").read(), flags=re.S)
glob = re.search(r"global:(.*?)local:", text, re.S)
if not glob:
    sys.exit("check-exports: no global: ... local: in %s" % exports_map)
listed = [n.strip() for n in glob.group(1).split(";") if n.strip()]
patterns = [n for n in listed if "*" in n]
named = {n for n in listed if "*" not in n}
if patterns != ["magpie_*"]:
    sys.exit("check-exports: %s: the only pattern should be magpie_*, found %s"
             % (exports_map, patterns))
api = re.sub(r"\btypedef\b[^;]*;", "", open(header, encoding="utf-8").read())  # not functions
declared = set(re.findall(r"\b(magpie_\w+)\s*\(", api))
expected = named | declared

out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True,
                     check=True).stdout
exported = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}

unexpected = sorted(exported - expected)
missing = sorted(expected - exported)
for name in unexpected:
    print("check-exports: %s exports %s, which is neither in %s nor declared in %s"
          % (library, name, exports_map, header), file=sys.stderr)
for name in missing:
    print("check-exports: %s does not export %s" % (library, name), file=sys.stderr)

GLIBC_OWN = re.compile(r"^(libc|libpthread|libdl|librt|ld-linux[-\w.]*)\.so(\.\d+)*$")
dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                         check=True).stdout
needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dynamic)
foreign = [n for n in needed if not GLIBC_OWN.match(n)]
for name in foreign:
    print("check-exports: %s loads %s, a library beyond glibc's own" % (library, name),
          file=sys.stderr)
if not needed:
    print("check-exports: %s has no DT_NEEDED entry at all (not even libc)" % library,
          file=sys.stderr)
if unexpected or missing or foreign or not needed:
    sys.exit(1)
print("check-exports: %d names exported, as expected (%d magpie_* from the header, %d listed); "
      "loads %s" % (len(exported), len(declared), len(named), ", ".join(needed)))
