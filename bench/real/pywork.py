"""pywork.py ROUNDS [RECORDS] - a pure-Python, allocation-heavy workload for the real-program benchmark.

Run by the benchmark harness under every allocator (through LD_PRELOAD) with the same arguments
(full mode: 20 rounds of 5000 records; quick mode: 1 round of 500).
Only the standard library; deterministic (fixed seeds, PYTHONHASHSEED set by the runner).
It builds and discards many small objects the way ordinary Python programs do: dicts of
records, string building and splitting, JSON round trips, sorting with keys, class instances,
and a tree that is built and torn down. Prints one line with a checksum so the work is not dead.
"""
import json
import random
import sys


class Node:
    __slots__ = ("key", "left", "right", "payload")

    def __init__(self, key, payload):
        self.key = key
        self.left = None
        self.right = None
        self.payload = payload


def tree_insert(root, node):
    if root is None:
        return node
    cur = root
    while True:
        if node.key < cur.key:
            if cur.left is None:
                cur.left = node
                return root
            cur = cur.left
        else:
            if cur.right is None:
                cur.right = node
                return root
            cur = cur.right


def tree_sum(root):
    total, stack = 0, [root]
    while stack:
        n = stack.pop()
        if n is not None:
            total += len(n.payload)
            stack.append(n.left)
            stack.append(n.right)
    return total


def one_round(rng, n):
    check = 0
    # Records in dicts, grouped and aggregated.
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 12)))
             for _ in range(n // 10 + 1)]
    records = [{"id": i, "name": rng.choice(words), "tags": rng.sample(words, 3),
                "score": rng.random()} for i in range(n)]
    groups = {}
    for r in records:
        groups.setdefault(r["name"], []).append(r)
    check += sum(len(v) for v in groups.values())
    # String building and splitting.
    text = " ".join(f"{r['name']}:{r['id']}:{r['score']:.4f}" for r in records)
    parts = text.split(" ")
    check += sum(len(p) for p in parts[::7])
    # JSON round trip.
    blob = json.dumps(records[: n // 2])
    back = json.loads(blob)
    check += len(back)
    # Sorting with keys (tuples and strings allocated per element).
    records.sort(key=lambda r: (r["name"], -r["score"]))
    check += records[0]["id"]
    # A tree of instances, built and dropped.
    root = None
    for i in range(n // 2):
        root = tree_insert(root, Node(rng.random(), words[i % len(words)] * 2))
    check += tree_sum(root)
    # Comprehension churn: sets, tuples, small lists.
    s = {(r["id"] % 97, r["name"][:2]) for r in records}
    check += len(s)
    return check


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    records = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    rng = random.Random(20261130)
    check = 0
    for _ in range(rounds):
        check += one_round(rng, records)
    print(f"pywork rounds={rounds} records={records} check={check}")


if __name__ == "__main__":
    main()
