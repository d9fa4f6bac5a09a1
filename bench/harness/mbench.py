#!/usr/bin/env python3
"""mbench.py - mimalloc-bench's self-contained programs under the harness's method.

Builds the programs of a mimalloc-bench checkout's bench/ directory with the compiler flags its
CMakeLists.txt gives them (-O2 -DNDEBUG, the release build, warnings off), then runs every row
as alternating fresh-process pairs: glibc (no preload) against each candidate preload, pair i of
every candidate before pair i+1 of any, each sample started by harness/launch.c (peak RSS from
wait4). A row's time is the process's wall time, except for the programs that run for a fixed
time and report a rate (larson, xmalloc-test, rptest, glibc-thread): their own figure, turned
into a time as mimalloc-bench's bench.sh does. Ratios are candidate / glibc (below 1: faster,
smaller), the median over the pairs, with the bootstrap interval of stats.py; the geomean of a
candidate's time ratios comes with its own (stats.bootstrap_geomean_ci).

Usage: mbench.py --render OUT/mbench.json [MORE/mbench.json...]
       mbench.py --mb DIR --lib SO [--out DIR] [--pairs N] [--fixed-pairs N] [--warmups N]
                 [--rows a,b,...] [--peers fastmm5,jemalloc,...] [--threads 1,2,4] [--extra NAME=SO]...
--render of several runs pools their pairs row by row (the rows and candidates of the first run
that the others also have) and gives the statistics of the pooled pairs. --fixed-pairs sets the
pairs of the fixed-time rows apart (default: --pairs), for a run with many pairs of the short rows.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CFLAGS = ["-O2", "-DNDEBUG", "-w"]
GNU89 = ["-std=gnu89"]

CFRAC = ("cfrac.c pops.c pconst.c pio.c pabs.c pneg.c pcmp.c podd.c phalf.c padd.c psub.c pmul.c "
         "pdivmod.c psqrt.c ppowmod.c atop.c ptoa.c itop.c utop.c ptou.c errorp.c pfloat.c pidiv.c "
         "pimod.c picmp.c primes.c pcfrac.c pgcd.c").split()
ESPRESSO = ("cofactor.c cols.c compl.c contain.c cubestr.c cvrin.c cvrm.c cvrmisc.c cvrout.c dominate.c "
            "equiv.c espresso.c essen.c exact.c expand.c gasp.c getopt.c gimpel.c globals.c hack.c "
            "indep.c irred.c main.c map.c matrix.c mincov.c opo.c pair.c part.c primes.c reduce.c "
            "rows.c set.c setc.c sharp.c sminterf.c solution.c sparse.c unate.c utility.c "
            "verify.c").split()
BARNES = "code.c code_io.c load.c grav.c getparam.c util.c".split()

# name: (compiler, sources relative to bench/, extra flags, libraries)
PROGRAMS = {
    "cfrac": ("cc", ["cfrac/" + s for s in CFRAC], GNU89 + ["-DNOMEMOPT=1"], ["-lm"]),
    "espresso": ("cc", ["espresso/" + s for s in ESPRESSO], GNU89, ["-lm"]),
    "barnes": ("cc", ["barnes/" + s for s in BARNES], GNU89, ["-lm"]),
    "larson": ("c++", ["larson/larson.cpp"], ["-std=c++17", "-DCPP=1"], ["-pthread"]),
    "larson-sized": ("c++", ["larson/larson.cpp"], ["-std=c++17", "-DCPP=1", "-DSIZED=1",
                                                    "-fsized-deallocation"], ["-pthread"]),
    "alloc-test": ("c++", ["alloc-test/test_common.cpp", "alloc-test/allocator_tester.cpp"],
                   ["-std=c++17", "-DBENCH=4"], ["-pthread"]),
    "cache-scratch": ("c++", ["cache-scratch/cache-scratch.cpp"], ["-std=c++17"], ["-pthread"]),
    "cache-thrash": ("c++", ["cache-thrash/cache-thrash.cpp"], ["-std=c++17"], ["-pthread"]),
    "xmalloc-test": ("cc", ["xmalloc-test/xmalloc-test.c"], [], ["-pthread"]),
    "malloc-large": ("c++", ["malloc-large/malloc-large.cpp"], ["-std=c++17"], ["-pthread"]),
    "mstress": ("cc", ["mstress/mstress.c"], [], ["-pthread"]),
    "mleak": ("cc", ["mleak/mleak.c"], [], ["-pthread"]),
    "rptest": ("cc", ["rptest/rptest.c", "rptest/thread.c", "rptest/timer.c"], ["-Irptest"],
               ["-pthread", "-lm"]),
    "glibc-simple": ("cc", ["glibc-bench/bench-malloc-simple.c"], [], ["-pthread"]),
    "glibc-thread": ("cc", ["glibc-bench/bench-malloc-thread.c"], [], ["-pthread"]),
}


def rate_time(pattern, scale=None):
    """A parser of a program's own figure: the time it reports, or scale / the rate it reports."""
    rx = re.compile(pattern)

    def parse(text):
        m = rx.search(text)
        if not m:
            return None
        v = float(m.group(1))
        if scale is None:
            return v
        return scale / v if v > 0 else None
    return parse


LARSON = rate_time(r"relative time: ([0-9.]+)")
XMALLOC = rate_time(r"rtime: ([0-9.]+)")
RPTEST = rate_time(r"([0-9]+) memory ops", 2000000.0)
GTHREAD = rate_time(r"^([0-9.]+) iterations", 1e9)


def rows(threads):
    """(row name, program, arguments, stdin file or None, parser or None), bench.sh's commands."""
    out = [("cfrac", "cfrac", ["17545186520507317056371138836327483792789528"], None, None),
           ("espresso", "espresso", ["@bench/espresso/largest.espresso"], None, None),
           ("barnes", "barnes", [], "bench/barnes/input", None),
           ("malloc-large", "malloc-large", [], None, None),
           ("glibc-simple", "glibc-simple", [], None, None),
           ("mleak10", "mleak", ["5"], None, None),
           ("mleak100", "mleak", ["50"], None, None),
           ("cache-scratch1", "cache-scratch", ["1", "1000", "1", "2000000", "1"], None, None),
           ("cache-thrash1", "cache-thrash", ["1", "1000", "1", "2000000", "1"], None, None)]
    for n in threads:
        s = str(n)
        out += [("larson-t" + s, "larson", ["5", "8", "1000", "5000", "100", "4141", s], None, LARSON),
                ("larson-sized-t" + s, "larson-sized", ["5", "8", "1000", "5000", "100", "4141", s], None,
                 LARSON),
                ("xmalloc-test-t" + s, "xmalloc-test", ["-w", s, "-t", "5", "-s", "64"], None, XMALLOC),
                ("alloc-test-t" + s, "alloc-test", [s], None, None),
                ("mstress-t" + s, "mstress", [s, "50", "25"], None, None),
                ("rptest-t" + s, "rptest", [s, "0", "1", "2", "500", "1000", "100", "8", "16000"], None, RPTEST),
                ("glibc-thread-t" + s, "glibc-thread", [s], None, GTHREAD)]
        if n > 1:
            out += [("cache-scratch-t" + s, "cache-scratch", [s, "1000", "1", "2000000", s], None, None),
                    ("cache-thrash-t" + s, "cache-thrash", [s, "1000", "1", "2000000", s], None, None)]
    return out


PEER_SONAMES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4",
                "mimalloc": "libmimalloc.so.2"}


def find_peer(soname):
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        p = os.path.join(d, soname)
        if os.path.exists(p):
            return p
    return None


def selects(name, row):
    """Whether --rows' entry `name` selects `row`: its row name, or its program's name (all of that
    program's rows: mleak selects mleak10 and mleak100, larson its thread counts, not larson-sized)."""
    return name in (row[0], row[1])


def build(mb, out, wanted):
    bench = os.path.join(mb, "bench")
    bindir = os.path.join(out, "bin")
    os.makedirs(bindir, exist_ok=True)
    launch = os.path.join(out, "launch")
    if not os.path.exists(launch):
        subprocess.check_call(["cc", "-O2", "-o", launch, os.path.join(HERE, "launch.c")])
    for name, (cc, srcs, flags, libs) in PROGRAMS.items():
        if name not in wanted:
            continue
        exe = os.path.join(bindir, name)
        if os.path.exists(exe):
            continue
        cmd = [cc] + CFLAGS + flags + ["-o", exe] + srcs + libs
        print("build:", " ".join(cmd[:8]), "...", file=sys.stderr)
        subprocess.check_call(cmd, cwd=bench)
    return bindir, launch


def run_one(launch, out, bindir, mb, row, env, timeout):
    name, prog, args, stdin, parse = row
    args = [os.path.join(mb, a[1:]) if a.startswith("@") else a for a in args]
    res, so, se = (os.path.join(out, f) for f in ("res.txt", "stdout.txt", "stderr.txt"))
    cmd = [launch, res, str(timeout), "-1", so, se]
    for k, v in env.items():
        cmd += ["-e", "%s=%s" % (k, v)]
    exe = os.path.join(bindir, prog)
    if stdin:  # the launcher reads /dev/null: the shell execs the program on the input file
        cmd += ["--", "/bin/sh", "-c", 'exec "$0" "$@" < "%s"' % os.path.join(mb, stdin), exe] + args
    else:
        cmd += ["--", exe] + args
    subprocess.call(cmd, cwd=out)
    with open(res) as f:
        fields = dict(kv.split("=", 1) for kv in f.read().split())
    text = open(so, errors="replace").read() + open(se, errors="replace").read()
    ok = fields.get("status") == "exit:0" and fields.get("timed_out") == "0"
    t = int(fields["wall_ns"]) / 1e9
    if parse is not None:
        t = parse(text)
        ok = ok and t is not None
    return {"ok": ok, "time_s": t, "maxrss_kb": int(fields["maxrss_kb"]),
            "status": fields.get("status"), "tail": text[-300:] if not ok else ""}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", help="mimalloc-bench checkout")
    ap.add_argument("--lib", help="libfastmm5.so")
    ap.add_argument("--render", metavar="JSON", nargs="+",
                    help="print the table of earlier runs' mbench.json (several: their pairs pooled), run nothing")
    ap.add_argument("--out", default=None)
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--fixed-pairs", type=int, default=None,
                    help="pairs of the rows that run for a fixed time and report a rate (default: --pairs)")
    ap.add_argument("--warmups", type=int, default=1)
    ap.add_argument("--rows", default="", help="comma-separated row or program names (a program: all its rows)")
    ap.add_argument("--peers", default="fastmm5,jemalloc,tcmalloc,mimalloc")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--extra", action="append", default=[], help="NAME=SO: one more preload candidate")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args(argv)
    if a.render:
        runs = []
        for path in a.render:
            with open(path) as f:
                runs.append(json.load(f))
        print(render(runs[0] if len(runs) == 1 else pool(runs)))
        return 0
    if not a.mb or not a.lib:
        ap.error("--mb and --lib are required")
    # absolute: the programs run in OUT (rptest writes its own result files where it runs)
    a.mb, a.lib = os.path.abspath(a.mb), os.path.abspath(a.lib)
    out = os.path.abspath(a.out or os.path.join(HERE, "..", "out", "mbench"))
    os.makedirs(out, exist_ok=True)

    variants = []
    for p in a.peers.split(","):
        so = os.path.abspath(a.lib) if p == "fastmm5" else find_peer(PEER_SONAMES.get(p, ""))
        if so is None:
            print("skip %s: not installed" % p, file=sys.stderr)
            continue
        variants.append((p, {"LD_PRELOAD": so}))
    for e in a.extra:
        n, so = e.split("=", 1)
        variants.append((n, {"LD_PRELOAD": os.path.abspath(so)}))

    wanted = [w for w in a.rows.split(",") if w]
    table = [r for r in rows([int(t) for t in a.threads.split(",")]) if not wanted or any(selects(w, r) for w in wanted)]
    if not table:
        ap.error("--rows %s selects no row (rows: %s)" % (a.rows, ", ".join(r[0] for r in rows([1, 2, 4]))))
    bindir, launch = build(a.mb, out, {r[1] for r in table})
    fixed_pairs = a.pairs if a.fixed_pairs is None else a.fixed_pairs
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "pairs": a.pairs,
               "fixed_pairs": fixed_pairs,
               "variants": {n: e for n, e in variants}, "rows": {}}
    t0 = time.time()
    for row in table:
        samples = {n: [] for n, _ in variants}
        base = {n: [] for n, _ in variants}
        pairs = fixed_pairs if row[4] is not None else a.pairs
        for i in range(a.warmups + pairs):
            for n, env in variants:
                b = run_one(launch, out, bindir, a.mb, row, {}, a.timeout)
                c = run_one(launch, out, bindir, a.mb, row, env, a.timeout)
                if i >= a.warmups:
                    base[n].append(b)
                    samples[n].append(c)
        rr = {n: row_stats(n, base[n], samples[n]) for n, _ in variants}
        results["rows"][row[0]] = rr
        line = " ".join("%s %.3f" % (n, rr[n]["time"]["median"] or 0) for n, _ in variants)
        print("[%5.0fs] %-18s %s" % (time.time() - t0, row[0], line), file=sys.stderr)
        with open(os.path.join(out, "mbench.json"), "w") as f:
            json.dump(results, f, indent=1)
    print(render(results))
    return 0


def times(samples):
    """The samples' times, None for a failed one (paired_ratio_stats leaves its pair out)."""
    return [s["time_s"] if s["ok"] else None for s in samples]


def row_stats(name, base, samples):
    """A row's figures for candidate `name`: its pairs' glibc samples `base` and its own `samples`."""
    bt, ct = times(base), times(samples)
    br = [s["maxrss_kb"] for s in base]
    cr = [s["maxrss_kb"] for s in samples]
    return {"time": stats.paired_ratio_stats(bt, ct, invert=True),
            "rss": stats.paired_ratio_stats(br, cr, invert=True),
            "glibc_time": stats.median([t for t in bt if t]) if any(bt) else None,
            "time_s": stats.median([t for t in ct if t]) if any(ct) else None,
            "glibc_rss_kb": stats.median(br), "rss_kb": stats.median(cr),
            "failed": [s["tail"] for s in samples if not s["ok"]][:1],
            "samples": {"glibc": base, name: samples}}


def pool(runs):
    """One result of several runs: each row's pairs of every run together, figures recomputed."""
    first = runs[0]
    names = [n for n in first["variants"] if all(n in r["variants"] for r in runs)]
    out = {"date": ", ".join(r["date"] for r in runs), "pairs": sum(r["pairs"] for r in runs),
           "variants": {n: first["variants"][n] for n in names}, "rows": {}}
    for row in first["rows"]:
        if not all(row in r["rows"] for r in runs):
            continue
        rr = {}
        for n in names:
            base = [s for r in runs for s in r["rows"][row][n]["samples"]["glibc"]]
            cand = [s for r in runs for s in r["rows"][row][n]["samples"][n]]
            rr[n] = row_stats(n, base, cand)
        out["rows"][row] = rr
    return out


def time_ratios(figures, name):
    """A row's paired time ratios of candidate `name`, from its samples (as row_stats takes them)."""
    return stats.paired_ratios(times(figures["samples"]["glibc"]), times(figures["samples"][name]), invert=True)


def render(results):
    names = list(results["variants"])
    lines = ["| row | pairs | glibc s | " + " | ".join("%s time (95%% CI)" % n for n in names) + " | " +
             " | ".join("%s RSS" % n for n in names) + " |",
             "|---|---:|---:|" + "---:|" * (2 * len(names))]
    geo = {n: ([], []) for n in names}
    for row, rr in results["rows"].items():
        cells = []
        for n in names:
            t = rr[n]["time"]
            if t["median"] is None:
                cells.append("failed")
                continue
            geo[n][0].append(t["median"])
            cells.append("%.3f (%.2f-%.2f)" % (t["median"], t["ci95"][0], t["ci95"][1]))
        rss = []
        for n in names:
            m = rr[n]["rss"]["median"]
            if m:
                geo[n][1].append(m)
            rss.append("%.2f" % m if m else "-")
        gt = rr[names[0]]["glibc_time"]
        lines.append("| %s | %d | %s | %s | %s |" % (row, rr[names[0]]["time"]["n"], "%.3f" % gt if gt else "-",
                                                   " | ".join(cells), " | ".join(rss)))
    ci = {n: stats.bootstrap_geomean_ci([time_ratios(rr[n], n) for rr in results["rows"].values() if n in rr])
          for n in names}
    lines.append("| **geomean** | | | " +
                 " | ".join("**%.3f** (%.3f-%.3f)" % ((stats.geomean(geo[n][0]),) + tuple(ci[n])) if ci[n] else "-"
                            for n in names) +
                 " | " + " | ".join("**%.3f**" % stats.geomean(geo[n][1]) for n in names) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
