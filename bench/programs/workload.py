# A fixed, deterministic Python workload for bench/run.py (the "python" real program).
#
# run.py runs it with /usr/bin/python3 and PYTHONMALLOC=malloc, so that every Python object goes
# through the allocator under test instead of CPython's own small-object pool. It builds and
# tears down the structures typical Python programs are made of (dicts of strings, lists of
# tuples, small class instances, JSON round trips, string building) and prints one RESULT line
# with a checksum of what it computed; run.py checks that every allocator gives the same one.
#
#   python3 workload.py [scale]     (scale 1 takes about a second)
import hashlib
import json
import sys


class Node:
    __slots__ = ("key", "value", "children")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []


def lcg(seed):
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield x >> 33


def build_tree(rng, n):
    nodes = [Node(0, "root")]
    for i in range(1, n):
        parent = nodes[next(rng) % len(nodes)]
        node = Node(i, "n%d-%x" % (i, next(rng) & 0xFFFF))
        parent.children.append(node)
        nodes.append(node)
    return nodes[0]


def walk(node):
    total, stack = 0, [node]
    while stack:
        n = stack.pop()
        total = (total * 31 + n.key + len(n.value)) & 0xFFFFFFFF
        stack.extend(n.children)
    return total


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    rng = lcg(12345)
    digest = hashlib.sha256()

    # Dicts of strings, grown and shrunk.
    for rnd in range(int(4 * scale) or 1):
        d = {}
        for i in range(60000):
            k = "key-%d-%d" % (next(rng) % 100000, rnd)
            d[k] = d.get(k, "") + "v%d," % i
        for k in list(d)[::3]:
            del d[k]
        digest.update(str(sum(len(v) for v in d.values())).encode())

    # Lists of tuples, sorted.
    rows = [(next(rng) % 1000, "s%d" % (next(rng) % 5000), i) for i in range(int(150000 * scale))]
    rows.sort()
    digest.update(repr(rows[:: max(1, len(rows) // 100)]).encode())
    del rows

    # Trees of small objects.
    for _ in range(int(3 * scale) or 1):
        digest.update(str(walk(build_tree(rng, 40000))).encode())

    # JSON round trips of nested documents.
    docs = []
    for i in range(int(3000 * scale)):
        docs.append({"id": i, "tags": ["t%d" % (next(rng) % 50) for _ in range(8)],
                     "attrs": {"a%d" % j: next(rng) % 1000 for j in range(6)},
                     "text": "lorem ipsum " * (next(rng) % 20)})
    text = json.dumps(docs, sort_keys=True)
    back = json.loads(text)
    digest.update(hashlib.sha256(json.dumps(back, sort_keys=True).encode()).digest())
    del docs, back, text

    # String building and splitting.
    parts = []
    for i in range(int(200000 * scale)):
        parts.append("%x" % (next(rng) & 0xFFFFF))
    s = "-".join(parts)
    words = s.split("-")
    counts = {}
    for w in words:
        counts[w[:2]] = counts.get(w[:2], 0) + 1
    digest.update(repr(sorted(counts.items())).encode())

    print("RESULT python time=0 checksum=%s" % digest.hexdigest()[:16])


main()
