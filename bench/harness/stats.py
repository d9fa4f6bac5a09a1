#!/usr/bin/env python3
"""Statistics of the libfastmm5 benchmark harness (standard library only).

The method (also in bench/README.md):

* A comparison is a list of n pairs (b_i, c_i): the baseline's and the candidate's measurement,
  taken in two fresh processes one right after the other.
* Time ratio of pair i:  r_i = b_i / c_i  (above 1: the candidate is faster).
  Memory ratio of pair i: m_i = c_i / b_i (peak RSS; below 1: the candidate uses less).
* Statistic: the median of the paired ratios (statistics.median: the middle value, or the mean
  of the two middle values when n is even). Gain = median(r) - 1.
* 95% interval: percentile bootstrap of that median. A fresh random.Random(20261130) per
  statistic; 10,000 resamples; each resample draws n indices with rng.randrange(n) (pairs are
  resampled with replacement, as whole pairs), and takes the median of the ratios drawn. The
  10,000 medians are sorted ascending; the bounds are the 2.5th and 97.5th percentiles by the
  nearest-rank rule: the P-th percentile of N sorted values is the value of 1-based rank
  ceil(P/100 * N), i.e. ranks 250 and 9750 (0-based indices 249 and 9749) for N = 10,000.
* A geometric mean over several comparisons (mimalloc-bench's rows) has an interval the same
  way: one random.Random(20261130); each of the 10,000 resamples draws every comparison's pairs
  with replacement, one comparison after the other, and takes the geomean of their medians.

Run as a program on a results JSON file to recompute every statistic from the raw samples and
compare with the stored values:  python3 bench/harness/stats.py bench/RESULTS.json
"""
import math
import statistics
import random

BOOTSTRAP_SEED = 20261130
BOOTSTRAP_RESAMPLES = 10000
CI_LOW_PERCENT = 2.5
CI_HIGH_PERCENT = 97.5


def median(values):
    return statistics.median(values)


def nearest_rank(sorted_values, percent):
    """P-th percentile by the nearest-rank rule: the value of 1-based rank ceil(P/100 * N)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("no values")
    rank = math.ceil(percent / 100.0 * n)
    rank = min(max(rank, 1), n)
    return sorted_values[rank - 1]


def bootstrap_median_ci(ratios, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED,
                        low=CI_LOW_PERCENT, high=CI_HIGH_PERCENT):
    """Percentile bootstrap interval of the median of `ratios` (one value per pair)."""
    n = len(ratios)
    if n == 0:
        return None
    rng = random.Random(seed)
    meds = []
    for _ in range(resamples):
        sample = [ratios[rng.randrange(n)] for _ in range(n)]
        meds.append(statistics.median(sample))
    meds.sort()
    return [nearest_rank(meds, low), nearest_rank(meds, high)]


def paired_ratios(pairs_b, pairs_c, invert=False):
    """The ratios b/c (or c/b with invert=True) of the pairs where both values are positive."""
    return [c / b if invert else b / c for b, c in zip(pairs_b, pairs_c)
            if b is not None and c is not None and b > 0 and c > 0]


def bootstrap_geomean_ci(rows, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED,
                         low=CI_LOW_PERCENT, high=CI_HIGH_PERCENT):
    """Percentile bootstrap interval of the geometric mean of several rows' medians: `rows` is
    one list of paired ratios a row; each resample draws every row's pairs with replacement
    (rows apart, in the order given) and takes the geomean of their medians."""
    rows = [r for r in rows if r]
    if not rows:
        return None
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        logs = 0.0
        for r in rows:
            n = len(r)
            logs += math.log(statistics.median([r[rng.randrange(n)] for _ in range(n)]))
        means.append(math.exp(logs / len(rows)))
    means.sort()
    return [nearest_rank(means, low), nearest_rank(means, high)]


def paired_ratio_stats(pairs_b, pairs_c, invert=False):
    """Median of paired ratios b/c (or c/b with invert=True) and its bootstrap interval.

    Pairs where either value is missing or not positive are left out (and counted)."""
    ratios = paired_ratios(pairs_b, pairs_c, invert)
    dropped = min(len(pairs_b), len(pairs_c)) - len(ratios)
    if not ratios:
        return {"n": 0, "dropped": dropped, "median": None, "ci95": None}
    return {"n": len(ratios), "dropped": dropped, "median": median(ratios),
            "ci95": bootstrap_median_ci(ratios)}


def geomean(values):
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _close(a, b):
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def recompute(results):
    """Recomputes every comparison's statistics in a results dict; returns a list of mismatches."""
    bad = []
    for wl in results.get("workloads", []):
        for cmp_ in wl.get("comparisons", []):
            if cmp_.get("status") != "ok":
                continue
            pairs = cmp_["pairs"]
            t = paired_ratio_stats([p["b"]["time_s"] for p in pairs], [p["c"]["time_s"] for p in pairs])
            m = paired_ratio_stats([p["b"]["maxrss_kb"] for p in pairs], [p["c"]["maxrss_kb"] for p in pairs],
                                   invert=True)
            for key, mine in (("time_ratio", t), ("rss_ratio", m)):
                stored = cmp_.get(key, {})
                same = _close(stored.get("median"), mine["median"]) and (
                    (stored.get("ci95") is None and mine["ci95"] is None) or
                    (stored.get("ci95") is not None and mine["ci95"] is not None and
                     all(_close(x, y) for x, y in zip(stored["ci95"], mine["ci95"]))))
                if not same:
                    bad.append((wl["name"], cmp_["candidate"], key, stored, mine))
    return bad


def main(argv):
    import json
    if len(argv) != 2:
        print("usage: stats.py RESULTS.json")
        return 2
    with open(argv[1]) as f:
        results = json.load(f)
    bad = recompute(results)
    n = sum(1 for wl in results.get("workloads", []) for c in wl.get("comparisons", [])
            if c.get("status") == "ok")
    for name, cand, key, stored, mine in bad:
        print(f"MISMATCH {name} {cand} {key}: stored {stored} recomputed {mine}")
    print(f"{n} comparisons recomputed from raw samples, {len(bad)} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv))
