#!/usr/bin/env python3
"""report.py - renders a results JSON file of the benchmark harness as Markdown.

Used by runner.py; also a program: python3 bench/harness/report.py RESULTS.json > RESULTS.md
"""
import json
import os
import statistics
import sys


def fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_kib(k):
    if k is None:
        return "-"
    return f"{k / 1024:.1f} MiB" if k >= 1024 else f"{k} KiB"


def fmt_bytes(b):
    if not isinstance(b, (int, float)):
        return str(b) if b is not None else "-"
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f} MiB"
    if b >= 1 << 10:
        return f"{b / (1 << 10):.1f} KiB"
    return f"{b:.0f} B"


def fmt_num(x):
    """Three decimals; three significant digits below 0.01 (debugging allocators are that slow)."""
    if x is None:
        return "-"
    return f"{x:.3f}" if abs(x) >= 0.01 else f"{x:.3g}"


def fmt_ratio(r):
    if not r or r.get("median") is None:
        return "-"
    ci = r.get("ci95")
    s = fmt_num(r["median"])
    if ci:
        s += f" [{fmt_num(ci[0])}, {fmt_num(ci[1])}]"
    return s


def fmt_pct(x):
    return "-" if x is None else f"{x * 100:+.1f}%"


def fmt_extra(key, v, ex=None):
    if v is None:
        return "-"
    if key == "os_memory_bytes" and ex:
        # fastmm_os_memory() where the allocator exports it, else VmRSS: say which.
        src = ex.get("os_memory_source", {})
        src = src.get("candidate") or src.get("baseline")
        return fmt_bytes(v) + (f" ({src})" if src else "")
    if key.endswith("_bytes"):
        return fmt_bytes(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def variant_map(results):
    out = {}
    for v in results.get("variants", []):
        out.setdefault(v["name"], v)
    return out


def header(results, json_name):
    m = results.get("machine", {})
    lib = results.get("library") or {}
    meth = results.get("method", {})
    L = []
    L.append("# libfastmm5 benchmark results")
    L.append("")
    if results.get("mode") != "full" or not results.get("selection", {}).get("complete"):
        L.append(f"> **{results.get('mode')} run"
                 + (" (partial: " + ", ".join(results["selection"]["patterns"]) + ")"
                    if results.get("selection", {}).get("patterns") else "")
                 + "** - not the full figures." + (" Status: " + results["status"] + "."
                                                     if results.get("status") != "complete" else ""))
        L.append("")
    L.append(f"- Date: {results.get('date')} (run took {results.get('elapsed_s')} s)")
    L.append(f"- Machine: {m.get('cpu')}, {m.get('logical_cpus')} logical CPUs, {m.get('memory_mib')} MiB; "
             f"{m.get('os')} (Debian {m.get('debian_version')}), kernel {m.get('kernel')}, {m.get('glibc')}; "
             f"cpufreq governor {m.get('cpufreq_governor')}; load average at start "
             f"{' '.join(m.get('loadavg_at_start') or [])}")
    libs = lib.items() if results.get("mode") == "compare" else [("libfastmm5", lib)]
    for name, li in libs:
        git = li.get("git") or {}
        L.append(f"- {name}: version {li.get('version')} (from {li.get('version_source')}), "
                 f"`{li.get('realpath')}`, soname {li.get('soname')}, sha256 {str(li.get('sha256'))[:16]}, "
                 f"source tree {git.get('describe') or git.get('commit') or '(no git commit)'}")
        if li and not li.get("looks_like_fastmm5", True):
            L.append(f"  - **warning: this file does not look like libfastmm5 (a stand-in?)**")
    vs = [v for v in results.get("variants", []) if v.get("available")]
    L.append("- Allocators: " + "; ".join(
        f"{v['name']} = {v['title']}"
        + "".join(f", {k}={val}" for k, val in v.get("env", {}).items())
        + (f" [{v['version']}]" if v.get("version") and v["role"] not in ("fastmm5", "fastmm5-debug") else "")
        + (f" (1/{v['divisor']} work)" if v.get("divisor", 1) > 1 else "")
        for v in vs))
    skipped = [v for v in results.get("variants", []) if not v.get("available")]
    if skipped:
        L.append("- Skipped: " + "; ".join(f"{v['name']}: {v['note']}" for v in skipped))
    notes = [v for v in vs if v.get("note")]
    for v in notes:
        L.append(f"- Note on {v['name']}: {v['note']}")
    b = results.get("build", {})
    L.append(f"- Workloads built with `{b.get('cc')} {' '.join(b.get('cflags', []))}` ({b.get('cc_version')})")
    tv = results.get("tools", {}).get("versions", {})
    if tv:
        L.append("- Real programs: " + "; ".join(f"{k}: {v}" for k, v in tv.items()))
    L.append(f"- Command: `{results.get('invocation')}`; every process's exact command is listed under "
             f"its workload; raw samples in `{json_name}`")
    L.append(f"- Method: {meth.get('pairs')} alternating fresh-process pairs (baseline, candidate) per "
             f"comparison after {meth.get('warmup_pairs')} warm-up pair(s); statistic = median of the paired "
             f"ratios; 95% CI = bootstrap of that median ({meth.get('bootstrap', {}).get('resamples')} "
             f"resamples of the pairs with replacement, random.Random({meth.get('bootstrap', {}).get('seed')}), "
             f"nearest-rank 2.5th/97.5th percentiles). See bench/README.md.")
    L.append("")
    return L


def summary(results):
    base = results.get("baseline", "glibc")
    S = results.get("summary", {})
    L = ["## Summary", ""]
    L.append(f"Time ratio = {base} time / allocator time (above 1: faster than {base}); RSS ratio = allocator "
             f"peak RSS / {base} peak RSS (below 1: smaller). Each workload contributes the median of its "
             f"paired ratios; the table gives their geometric mean.")
    L.append("")
    for key, title in (("general_and_real", "General workloads and real programs"),
                       ("micro", "Micro-benchmarks (normal mode)"), ("debug", "Debug-mode workloads")):
        g = S.get(key) or {}
        if not g:
            continue
        L.append(f"**{title}**")
        L.append("")
        L.append(f"| allocator | time ratio {base}/x (geomean) | RSS ratio x/{base} (geomean) | workloads |")
        L.append("|---|---:|---:|---:|")
        for cand, d in sorted(g.items(), key=lambda kv: -(kv[1]["time_ratio_geomean"] or 0)):
            L.append(f"| {cand} | {fmt_num(d['time_ratio_geomean'])} | {fmt_num(d['rss_ratio_geomean'])} | {d['n']} |")
        L.append("")
    gaps = S.get("best_peer_gaps") or {}
    if gaps:
        L.append("**Gap to the best peer** (per workload: ratio(primary) / ratio(best peer) - 1, both against "
                 f"{base} from their own pairs; negative: the best peer is faster)")
        L.append("")
        L.append("| workload | primary | its ratio | best peer | its ratio | gap |")
        L.append("|---|---|---:|---|---:|---:|")
        for name, g in gaps.items():
            L.append(f"| {name} | {g['primary']} | {fmt_num(g['primary_ratio'])} | {g['best_peer']} | "
                     f"{fmt_num(g['best_peer_ratio'])} | {fmt_pct(g['gap'])} |")
        L.append("")
    if results.get("failures"):
        L.append("**Failures**")
        L.append("")
        for f in results["failures"]:
            L.append(f"- {f}")
        L.append("")
    return L


def workload_section(wl, results):
    base = results.get("baseline", "glibc")
    L = [f"### {wl['name']} ({wl['group']})", "", wl["description"] + "."
         + (f" Timing: {'internal loop time' if wl['timing'] == 'internal' else 'process wall time'}"
            + (f", pinned to CPU {wl['pinned_cpu']}" if wl.get("pinned_cpu") is not None else "") + "."), ""]
    if wl.get("error"):
        L += [f"**Error:** {wl['error']}", ""]
    comps = wl["comparisons"]
    cols = wl.get("columns") or []
    ok = [c for c in comps if c["status"] == "ok" and c.get("median")]
    head = (f"| allocator | median time | time ratio {base}/x [95% CI] | gain | peak RSS (median) "
            f"| RSS ratio x/{base} [95% CI] |" + "".join(f" {h} |" for _, h in cols))
    L.append(head)
    L.append("|---|---:|---:|---:|---:|---:|" + "---:|" * len(cols))
    # The baseline row: its samples from the comparisons run at full work.
    full = [c for c in ok if c.get("divisor", 1) == 1]
    if full:
        bt = [p["b"]["time_s"] for c in full for p in c["pairs"]]
        br = [p["b"]["maxrss_kb"] for c in full for p in c["pairs"]]
        med = statistics.median
        ex = full[0].get("extra_medians", {})
        L.append(f"| {base} (baseline) | {fmt_time(med(bt))} | 1 | - | {fmt_kib(med(br))} | 1 |"
                 + "".join(f" {fmt_extra(k, ex.get(k, {}).get('baseline'), {kk: {'baseline': vv.get('baseline')} for kk, vv in ex.items()})} |" for k, _ in cols))
    for c in comps:
        if c["status"] != "ok" or not c.get("median"):
            L.append(f"| {c['candidate']} | {c['status']}: {c['note']} |  |  |  |  |" + " |" * len(cols))
            continue
        med = c["median"]
        work = f" (1/{c['divisor']} work)" if c.get("divisor", 1) > 1 else ""
        ex = c.get("extra_medians", {})
        L.append(f"| {c['candidate']} | {fmt_time(med['candidate_time_s'])}{work} | {fmt_ratio(c['time_ratio'])} "
                 f"| {fmt_pct(c.get('gain'))} | {fmt_kib(med['candidate_maxrss_kb'])} | {fmt_ratio(c['rss_ratio'])} |"
                 + "".join(f" {fmt_extra(k, ex.get(k, {}).get('candidate'), {kk: {'candidate': vv.get('candidate')} for kk, vv in ex.items()})} |" for k, _ in cols))
    gap = (results.get("summary", {}).get("best_peer_gaps") or {}).get(wl["name"])
    if gap:
        L += ["", f"Gap of {gap['primary']} to the best peer ({gap['best_peer']}): {fmt_pct(gap['gap'])}."]
    L += ["", "<details><summary>commands</summary>", "", "```"]
    seen = set()
    for c in comps:
        for k in ("baseline", "candidate"):
            cmd = c["commands"][k]
            if cmd not in seen:
                seen.add(cmd)
                L.append(cmd)
    L += ["```", "", "</details>", ""]
    return L


def render(results, json_name="RESULTS.json"):
    L = header(results, json_name)
    L += summary(results)
    groups = [("micro", "Micro-benchmarks (normal mode)"), ("debug", "Debug-mode workloads"),
              ("general", "General allocator work"), ("real", "Real programs")]
    for g, title in groups:
        wls = [w for w in results.get("workloads", []) if w["group"] == g]
        if not wls:
            continue
        L += [f"## {title}", ""]
        for w in wls:
            L += workload_section(w, results)
    return "\n".join(L) + "\n"


def main(argv):
    if len(argv) != 2:
        print("usage: report.py RESULTS.json > RESULTS.md", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        results = json.load(f)
    sys.stdout.write(render(results, os.path.basename(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
