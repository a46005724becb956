"""A deterministic Python workload for the LD_PRELOAD comparison (tests/preload/preload.sh).

It exercises the allocator through the interpreter: dicts, lists, sets and strings of many
sizes, a JSON round trip, bytes that grow by appending (realloc), and a few threads working at
once. Every result is printed in a fixed order, so the output of a run under glibc and a run
under magpie must be identical byte for byte.
"""

import collections
import hashlib
import json
import random
import re
import sys
import threading
import zlib


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


def dicts(rng):
    table = {}
    for i in range(100_000):
        key = "k%07d-%s" % (rng.randrange(10**7), "x" * (i % 13))
        table[key] = table.get(key, 0) + i
    for key in list(table)[::3]:
        del table[key]
    nested = {i: {"id": i, "tags": [str(j) for j in range(i % 9)]} for i in range(20_000)}
    merged = {**nested, **{i: {"id": -i} for i in range(0, 20_000, 7)}}
    counts = collections.Counter(len(k) for k in table)
    return [
        "dicts.size %d" % len(table),
        "dicts.sum %d" % sum(table.values()),
        "dicts.lengths %s" % sorted(counts.items()),
        "dicts.merged %d %d" % (len(merged), sum(v["id"] for v in merged.values())),
    ]


def lists(rng):
    values = [rng.randrange(-(10**9), 10**9) for _ in range(150_000)]
    ordered = sorted(values)
    pairs = sorted(((v % 1000, -v) for v in values[:50_000]), reverse=True)
    chunks = [values[i : i + 97] for i in range(0, len(values), 97)]
    squares = [x * x for x in range(100_000) if x % 3]
    grown = []
    for i in range(100_000):
        grown.append((i, str(i)))
        if i % 10 == 9:
            grown.pop(i % 7)
    deque = collections.deque(maxlen=5000)
    for v in values:
        deque.append(v)
    uniques = set(v % 65536 for v in values)
    return [
        "lists.minmax %d %d" % (ordered[0], ordered[-1]),
        "lists.median %d" % ordered[len(ordered) // 2],
        "lists.pairs %s" % (pairs[:3],),
        "lists.chunks %d %d" % (len(chunks), sum(len(c) for c in chunks)),
        "lists.squares %d" % sum(squares),
        "lists.grown %d %s" % (len(grown), grown[-1]),
        "lists.deque %d" % sum(deque),
        "lists.set %d" % len(uniques),
    ]


def strings(rng):
    words = ["".join(chr(97 + rng.randrange(26)) for _ in range(rng.randrange(1, 12)))
             for _ in range(60_000)]
    text = " ".join(words)
    upper = text.upper().replace("E", "€")
    encoded = upper.encode("utf-8")
    decoded = encoded.decode("utf-8")
    parts = text.split(" ")
    formatted = "\n".join("%-12s|%5d|%r" % (w, i, w[::-1]) for i, w in enumerate(words[:20_000]))
    found = re.findall(r"\b([aeiou][a-z]{3,})\b", text)
    builder = []
    for i in range(50_000):
        builder.append(f"{i:06x}:{words[i % len(words)]}")
    joined = ",".join(builder)
    packed = zlib.compress(encoded, 6)
    return [
        "strings.text %d %s" % (len(text), digest(text.encode())),
        "strings.utf8 %d %d %s" % (len(encoded), len(decoded), decoded == upper),
        "strings.split %d" % len(parts),
        "strings.formatted %s" % digest(formatted.encode()),
        "strings.regex %d %s" % (len(found), found[:3]),
        "strings.joined %d %s" % (len(joined), digest(joined.encode())),
        "strings.zlib %s" % (zlib.decompress(packed) == encoded),
    ]


def json_round_trip(rng):
    document = {
        "records": [
            {
                "id": i,
                "name": "record-%d" % i,
                "score": rng.randrange(10**6) / 7,
                "flags": [bool(i & (1 << b)) for b in range(6)],
                "child": {"depth": i % 5, "label": "x" * (i % 40)},
            }
            for i in range(15_000)
        ],
        "meta": {"version": 3, "unicode": "caf\u00e9 \u2603 \U0001f600"},
    }
    text = json.dumps(document, sort_keys=True, indent=1)
    back = json.loads(text)
    again = json.dumps(back, sort_keys=True, indent=1)
    return [
        "json.size %d" % len(text),
        "json.digest %s" % digest(text.encode()),
        "json.equal %s %s" % (back == document, again == text),
    ]


def buffers(rng):
    data = bytearray()
    for i in range(100_000):
        data += bytes([i % 251]) * (1 + i % 17)
    chunks = [bytes(rng.randrange(256) for _ in range(64)) for _ in range(2_000)]
    blob = b"".join(chunks) * 50
    return [
        "buffers.bytearray %d %s" % (len(data), digest(bytes(data))),
        "buffers.blob %d %s" % (len(blob), digest(blob)),
    ]


def worker(index, results):
    rng = random.Random(1000 + index)
    local = {}
    for i in range(30_000):
        key = (rng.randrange(5_000), "w%d" % index)
        local.setdefault(key, []).append(i)
    text = ";".join("%d=%d" % (k[0], len(v)) for k, v in sorted(local.items()))
    results[index] = (len(local), digest(text.encode()))


def threads():
    results = {}
    pool = [threading.Thread(target=worker, args=(i, results)) for i in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return ["threads.%d %d %s" % (i, results[i][0], results[i][1]) for i in sorted(results)]


def main():
    rng = random.Random(20240601)
    lines = []
    for section in (dicts, lists, strings, json_round_trip, buffers):
        lines.extend(section(rng))
    lines.extend(threads())
    for line in lines:
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
