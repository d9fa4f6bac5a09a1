#!/usr/bin/env python3
"""runner.py - the libfastmm5 benchmark harness. Started by bench/run.sh; see bench/README.md.

Standard library only. It builds the C workloads, finds (and, as root, installs) the peer
allocators, checks every preload with a probe, runs every workload as alternating fresh-process
pairs (baseline, candidate) after warm-up pairs, and writes a JSON file with every raw sample
plus a Markdown table (bench/harness/report.py renders it).
"""
import argparse
import datetime
import fnmatch
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import inputs  # noqa: E402
import report  # noqa: E402
import stats  # noqa: E402

BENCH_DIR = os.path.dirname(HERE)
SRCDIR = os.path.dirname(BENCH_DIR)
SCHEMA = "libfastmm5-bench/1"

# ----------------------------------------------------------------------------------------------
# Method parameters
# ----------------------------------------------------------------------------------------------
FULL = {"pairs": 25, "warmups": 3, "timeout": 300.0}
QUICK = {"pairs": 3, "warmups": 1, "timeout": 30.0}

# Environment variables that would change what an allocator does; removed from every child's
# environment so only what the harness sets applies.
SCRUB_PREFIXES = ("LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_", "GLIBC_TUNABLES", "FASTMM5_", "EF_",
                  "DUMA_", "TCMALLOC_", "MIMALLOC_", "JE_MALLOC_CONF", "PYTHON", "VALGRIND_")


# ----------------------------------------------------------------------------------------------
# Allocator variants
# ----------------------------------------------------------------------------------------------
class Variant:
    """One way of running a workload: a preload, environment settings and/or a command prefix.

    divisor: the variant runs 1/divisor of the workload's work (and so does the baseline in the
    same pairs), for debugging allocators that are orders of magnitude slower per operation."""

    def __init__(self, name, title, role, preload=None, env=None, prefix=None, packages=(),
                 divisor=1, verify_malloc=None, version=None, note="", slow_start=False):
        self.name = name
        self.title = title
        self.role = role            # baseline | fastmm5 | peer | fastmm5-debug | debug-peer | compare
        self.preload = preload      # absolute path or None
        self.env = dict(env or {})
        self.prefix = list(prefix or [])
        self.packages = list(packages)
        self.divisor = divisor
        # The probe checks that malloc resolves into the preload itself (same real path); for a
        # variant without a preload, that malloc_from contains this substring instead.
        self.verify_malloc = verify_malloc
        self.version = version
        self.note = note
        self.available = True
        # Seconds of start-up per process (Valgrind): in quick mode it runs in one workload only.
        self.slow_start = slow_start

    def set_env(self):
        """The environment settings this variant adds (for the recorded command lines)."""
        out = {}
        if self.preload:
            out["LD_PRELOAD"] = self.preload
        out.update(self.env)
        return out

    def to_json(self):
        return {"name": self.name, "title": self.title, "role": self.role, "preload": self.preload,
                "env": self.env, "prefix": self.prefix, "packages": self.packages,
                "divisor": self.divisor, "version": self.version, "available": self.available,
                "note": self.note}


# name, title, role, Debian packages, shared object names, env, prefix, divisor, probe check
PEER_TABLE = [
    ("jemalloc", "jemalloc", "peer", ["libjemalloc2"], ["libjemalloc.so.2"], {}, None, 1, "jemalloc"),
    ("tcmalloc", "tcmalloc (minimal)", "peer", ["libtcmalloc-minimal4"], ["libtcmalloc_minimal.so.4"], {},
     None, 1, "tcmalloc"),
    ("mimalloc", "mimalloc", "peer", ["libmimalloc2.0"], ["libmimalloc.so.2"], {}, None, 1, "mimalloc"),
]
DEBUG_PEER_TABLE = [
    ("glibc-check", "glibc malloc-check (libc_malloc_debug.so)", "debug-peer", ["libc6"],
     ["libc_malloc_debug.so.0"], {"GLIBC_TUNABLES": "glibc.malloc.check=3"}, None, 1, "libc_malloc_debug"),
    ("jemalloc-junk", "jemalloc with junk filling", "debug-peer", ["libjemalloc2"], ["libjemalloc.so.2"],
     {"MALLOC_CONF": "junk:true"}, None, 1, "jemalloc"),
    ("efence", "Electric Fence", "debug-peer", ["electric-fence"], ["libefence.so.0"], {}, None, 200, "efence"),
    # DUMA's default (protect freed memory) exhausts vm.max_map_count within a few thousand
    # frees and aborts; DUMA_PROTECT_FREE=0 keeps overflow detection and reuses freed pages.
    ("duma", "DUMA", "debug-peer", ["duma"], ["libduma.so.0"],
     {"DUMA_PROTECT_FREE": "0"}, None, 200, "duma"),
    ("valgrind", "Valgrind memcheck", "debug-peer", ["valgrind"], [], {},
     ["valgrind", "--tool=memcheck", "--quiet", "--leak-check=no"], 20, None),
]


def lib_dirs():
    dirs = []
    ma = sysconfig.get_config_var("MULTIARCH")
    if not ma:
        try:
            ma = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
        except OSError:
            ma = ""
    for base in ("/usr/lib", "/lib"):
        if ma:
            dirs.append(os.path.join(base, ma))
    dirs += ["/usr/lib", "/lib", "/usr/lib64", "/lib64", "/usr/local/lib"]
    return [d for d in dirs if os.path.isdir(d)]


def find_lib(names):
    for d in lib_dirs():
        for n in names:
            p = os.path.join(d, n)
            if os.path.exists(p):
                return p
    return None


def dpkg_version(pkg):
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except OSError:
        pass
    return None


def install_packages(pkgs, log, logfile):
    """apt-get install as root; one apt-get update and a retry if the first attempt fails."""
    if not pkgs:
        return
    if os.geteuid() != 0:
        log(f"  not root: cannot install {' '.join(pkgs)}; those peers are skipped")
        return
    if not shutil.which("apt-get"):
        log("  no apt-get: peers that are missing are skipped")
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends"] + pkgs
    log(f"  installing: {' '.join(cmd)}")
    with open(logfile, "a") as lf:
        r = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
        if r.returncode != 0:
            log("  apt-get install failed; running apt-get update and retrying once")
            subprocess.run(["apt-get", "update"], stdout=lf, stderr=subprocess.STDOUT, env=env)
            r = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        # Install what can be installed one by one, so one missing package does not cost the rest.
        with open(logfile, "a") as lf:
            for p in pkgs:
                subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", p], stdout=lf,
                               stderr=subprocess.STDOUT, env=env)
        log(f"  apt-get reported errors; see {logfile}")


def peer_variants(table, want_install, log, logfile, wanted=lambda name: True):
    """Variants for the rows of a peer table; missing ones are installed (if allowed) or noted."""
    missing_pkgs = []
    for name, title, role, pkgs, libs, env, prefix, divisor, check in table:
        if not wanted(name):
            continue
        present = (find_lib(libs) if libs else True) and (shutil.which(prefix[0]) if prefix else True)
        if not present:
            missing_pkgs += [p for p in pkgs if p != "libc6"]
    if missing_pkgs and want_install:
        install_packages(sorted(set(missing_pkgs)), log, logfile)
    out = []
    for name, title, role, pkgs, libs, env, prefix, divisor, check in table:
        v = Variant(name, title, role, env=env, prefix=prefix, packages=pkgs, divisor=divisor,
                    verify_malloc=check, slow_start=bool(prefix))
        if libs:
            v.preload = find_lib(libs)
            if not v.preload:
                v.available = False
                v.note = f"not installed ({', '.join(libs)} not found; Debian package {', '.join(pkgs)})"
        if prefix:
            exe = shutil.which(prefix[0])
            if not exe:
                v.available = False
                v.note = f"not installed ({prefix[0]} not found; Debian package {', '.join(pkgs)})"
            else:
                v.prefix = [exe] + prefix[1:]
        v.version = ", ".join(f"{p} {dpkg_version(p)}" for p in pkgs if dpkg_version(p)) or None
        out.append(v)
    return out


# ----------------------------------------------------------------------------------------------
# Workloads
# ----------------------------------------------------------------------------------------------
class Workload:
    """A workload: argv(work) gives the command for a given amount of work (an int, which a
    variant's divisor divides, or a tuple for workloads no reduced-work variant runs).

    timing: 'internal' (the BENCH line's elapsed_ns: the measured loop only) or 'wall' (the
    whole process, for real programs). pin: single-threaded internal workloads are pinned to
    one CPU unless --pin none."""

    def __init__(self, name, group, argv, work_full, work_quick, description, threads=1,
                 timing="internal", quick=False, env=None, columns=()):
        self.name = name
        self.group = group
        self.argv = argv
        self.work_full = work_full
        self.work_quick = work_quick
        self.description = description
        self.threads = threads
        self.timing = timing
        self.quick = quick
        self.env = dict(env or {})
        self.columns = list(columns)   # (extra field, heading) shown in the report


SIZES = [1, 39, 40, 41, 64, 128, 136, 256, 1024, 4096, 16384, 65536]
THREADS = [1, 2, 4]


def size_name(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def build_workloads(bins, tools, workdir):
    b = lambda name: os.path.join(bins, name)  # noqa: E731
    W = []
    # -- seeds' micro-benchmarks, normal mode -------------------------------------------------
    for s in SIZES:
        ops = 20_000_000 if s <= 256 else 10_000_000 if s <= 16384 else 4_000_000
        W.append(Workload(f"allocfree-{size_name(s)}", "micro",
                          lambda w, s=s: [b("allocfree"), str(s), str(w)], ops, ops // 1000,
                          f"one {s}-byte block allocated and freed repeatedly (ops = malloc+free pairs)",
                          quick=s in (64, 65536)))
    # 1 MiB: 200,000 pairs, glibc's mmap and munmap of each take 1.7 s (a run of 1,000,000: 8.5 s,
    # 100 of them in a full run's 25 pairs against four peers)
    for s, ops in ((8192, 10_000_000), (1 << 20, 200_000)):
        W.append(Workload(f"allocfree-aligned-{size_name(s)}", "micro",
                          lambda w, s=s: [b("allocfree"), str(s), str(w), "4096"], ops, ops // 1000,
                          f"one {s}-byte block allocated through posix_memalign(4096) and freed repeatedly"))
    for name, mode, a, bb, full, qwork, quick, desc in [
        ("realloc-inplace-64-63", "alt", 64, 63, 10_000_000, 10_000, True,
         "in-place small resize: realloc 64 -> 63 -> 64 bytes, alternating"),
        ("realloc-up-64-200", "fresh", 64, 200, 4_000_000, 4_000, False,
         "control: forced (moving) small upsize: malloc 64, realloc 200, free"),
        ("realloc-down-256-32", "fresh", 256, 32, 4_000_000, 4_000, False,
         "control: moving small downsize (below half): malloc 256, realloc 32, free"),
        ("realloc-medium-20000-30000", "alt", 20000, 30000, 2_000_000, 2_000, False,
         "control: medium resize, 20000 <-> 30000 bytes, alternating"),
        ("realloc-large-1m-1.5m", "alt", 1_000_000, 1_500_000, 1_000_000, 1_000, False,
         "control: large resize, 1,000,000 <-> 1,500,000 bytes, alternating"),
    ]:
        W.append(Workload(name, "micro",
                          lambda w, mode=mode, a=a, bb=bb: [b("realloc"), mode, str(a), str(bb), str(w)],
                          full, qwork, desc, quick=quick, columns=[("moved", "moved")]))
    # -- seeds' micro-benchmarks, debug mode --------------------------------------------------
    for s in SIZES:
        ops = (1_000_000 if s <= 256 else 500_000 if s <= 1024 else 250_000 if s <= 4096
               else 100_000 if s <= 16384 else 30_000)
        W.append(Workload(f"debug-allocfree-{size_name(s)}", "debug",
                          lambda w, s=s: [b("allocfree"), str(s), str(w)], ops, ops // 100,
                          f"debug mode: one {s}-byte block allocated and freed repeatedly",
                          quick=s == 4096))
    W.append(Workload("debug-growth-8t", "debug",
                      lambda w: [b("debuggrowth"), "8", str(w), "70000"], 30_000, 400,
                      "debug-mode growth scenario: 8 threads x N iterations of malloc(random 1..70000)"
                      " + fill + free; OS memory held afterwards", threads=8, quick=True,
                      columns=[("os_memory_bytes", "OS memory after")]))
    # -- general allocator work, at 1, 2 and 4 threads ----------------------------------------
    general = [
        ("sweep-small", ["sweep", "small"], 2_000_000, 20_000,
         "size sweep over the small class (1..2622 B), ring of 256 live blocks per thread"),
        ("sweep-medium", ["sweep", "medium"], 100_000, 300,
         "size sweep over the medium class (2623..558904 B), ring of 32 live blocks per thread"),
        ("sweep-large", ["sweep", "large"], 10_000, 100,
         "size sweep over the large class (558905 B..4 MiB), ring of 4 live blocks per thread"),
        ("sweep-large-aligned", ["sweep", "large-aligned"], 10_000, 100,
         "the large sweep with page-aligned blocks (posix_memalign(4096, size)), ring of 4 per thread"),
        ("mix", ["mix"], 1_000_000, 5_000,
         "random sizes skewed small, allocations and frees interleaved, ~4096 live blocks per thread"),
        ("prodcons", ["prodcons"], 1_000_000, 10_000,
         "ring of producer/consumer threads, every block freed by another thread (t1: same-thread control)"),
        ("growth-string", ["growth", "string"], 300, 3,
         "realloc-driven growth: string append 1..48 B at a time up to 64 KiB, one realloc per append"),
        ("growth-array", ["growth", "array"], (20, 524288), (1, 65536),
         "realloc-driven growth: 8-byte array grown 1.5x when full, up to 4 MiB"),
        ("threads", ["threads"], 500, 20,
         "many short-lived threads (total N), each 256 small/medium allocations; leftovers freed by main"),
    ]
    quick_general = {("sweep-small", 1), ("sweep-large", 1), ("mix", 2),
                     ("prodcons", 2), ("growth-string", 1), ("growth-array", 1), ("threads", 2)}
    for base, argv0, full, quick, desc in general:
        for t in THREADS:
            prog, *mode = argv0
            W.append(Workload(f"{base}-t{t}", "general",
                              lambda w, prog=prog, mode=mode, t=t: [b(prog)] + mode + [str(t)]
                              + ([str(x) for x in w] if isinstance(w, tuple) else [str(w)]),
                              full, quick, desc + (f"; {t} thread{'s' if t > 1 else ''}" if base != "threads"
                                                   else f"; {t} at a time"),
                              threads=t, quick=(base, t) in quick_general,
                              columns=[("contention", "arena contention")]))
    # -- real programs under preload ------------------------------------------------------------
    if tools.get("python"):
        W.append(Workload("python", "real",
                          lambda w: [tools["python"], os.path.join(BENCH_DIR, "real", "pywork.py"),
                                     str(w[0]), str(w[1])],
                          (20, 5000), (1, 500), "python3 running bench/real/pywork.py (pure-Python dicts, strings, json,"
                          " sorting, objects)", threads=1, timing="wall", quick=True,
                          env={"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}))
    if tools.get("sort"):
        W.append(Workload("sort", "real",
                          lambda w: [tools["sort"], "-o", "/dev/null", inputs.sort_input(workdir, w)],
                          1_000_000, 20_000, "sort(1) of a generated text file (N lines, ~31 bytes each),"
                          " LC_ALL=C", threads=2, timing="wall", quick=True))
    if tools.get("gcc"):
        W.append(Workload("gcc", "real",
                          lambda w: [tools["gcc"], "-O2", "-c", "-o", "/dev/null", inputs.c_input(workdir, w)],
                          60, 1, "gcc -O2 -c of a generated C file (N functions with switches, loops,"
                          " string tables)", threads=1, timing="wall", quick=True))
    return W


# ----------------------------------------------------------------------------------------------
# Running one process
# ----------------------------------------------------------------------------------------------
class RunResult:
    __slots__ = ("ok", "time_s", "wall_s", "maxrss_kb", "rc", "extra", "error")

    def __init__(self):
        self.ok = False
        self.time_s = None
        self.wall_s = None
        self.maxrss_kb = None
        self.rc = None
        self.extra = {}
        self.error = ""

    def sample(self):
        d = {"time_s": self.time_s, "wall_s": self.wall_s, "maxrss_kb": self.maxrss_kb}
        if self.extra:
            d["extra"] = self.extra
        return d


def parse_bench_line(text):
    for line in text.splitlines():
        if line.startswith("BENCH "):
            out = {}
            for tok in line[6:].split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    try:
                        out[k] = int(v)
                    except ValueError:
                        try:
                            out[k] = float(v)
                        except ValueError:
                            out[k] = v
            return out
    return None


LAUNCHER = [None]   # path of the built launch.c


def run_process(argv, overrides, timing, timeout, cpu, scratch, env0):
    """Runs argv as a fresh process through the launcher; returns a RunResult.

    overrides: the environment settings of the variant and workload (LD_PRELOAD ...), applied by
    the launcher in the child only. Peak RSS is ru_maxrss from the launcher's wait4(): the
    process and the descendants it waited for (gcc's cc1 and as, for instance)."""
    res = RunResult()
    out_path = os.path.join(scratch, "stdout")
    err_path = os.path.join(scratch, "stderr")
    result_path = os.path.join(scratch, "result")
    try:
        os.unlink(result_path)
    except FileNotFoundError:
        pass
    cmd = [LAUNCHER[0], result_path, f"{timeout:g}", str(cpu if cpu is not None else -1), out_path, err_path]
    for k, v in overrides.items():
        cmd += ["-e", f"{k}={v}"]
    cmd += ["--"] + argv
    try:
        pid = os.posix_spawn(cmd[0], cmd, env0)
        _, status = os.waitpid(pid, 0)
    except OSError as e:
        res.error = f"cannot start the launcher: {e}"
        return res
    facts = {}
    for tok in read_file(result_path).split():
        k, _, v = tok.partition("=")
        facts[k] = v
    if os.waitstatus_to_exitcode(status) != 0 or "wall_ns" not in facts:
        res.error = "the launcher failed: " + read_file(err_path)[-300:]
        return res
    res.wall_s = int(facts["wall_ns"]) / 1e9
    res.maxrss_kb = int(facts["maxrss_kb"])
    kind, _, code = facts["status"].partition(":")
    code = int(code)
    out = read_file(out_path)
    if facts.get("timed_out") == "1":
        res.rc = -9
        res.error = f"timed out after {timeout:g} s"
    elif kind == "signal":
        res.rc = -code
        try:
            name = signal.Signals(code).name
        except ValueError:
            name = "?"
        res.error = f"killed by signal {code} ({name})"
    else:
        res.rc = code
        if code != 0:
            res.error = f"exit status {code}"
    err = read_file(err_path)
    if res.error:
        tail = err[-600:].strip()
        if tail:
            res.error += ": " + " | ".join(tail.splitlines()[-6:])
        return res
    if "cannot be preloaded" in err:
        res.error = "the dynamic linker ignored the preload: " + err.strip().splitlines()[0]
        return res
    fields = parse_bench_line(out)
    if timing == "internal":
        if not fields or "elapsed_ns" not in fields:
            res.error = "no BENCH line in the output: " + out[-300:]
            return res
        res.time_s = fields.pop("elapsed_ns") / 1e9
    else:
        res.time_s = res.wall_s
        m = re.search(r"check=(\d+)", out)
        fields = {"check": int(m.group(1))} if m else {}
    fields.pop("workload", None)
    res.extra = fields
    res.ok = True
    return res


# ----------------------------------------------------------------------------------------------
# Progress
# ----------------------------------------------------------------------------------------------
class Progress:
    def __init__(self, total_runs, quiet=False):
        self.total = max(1, total_runs)
        self.done = 0
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty() and not quiet
        self.quiet = quiet
        self.last = time.monotonic()

    @staticmethod
    def fmt(sec):
        sec = int(sec)
        return f"{sec // 3600}h{sec // 60 % 60:02d}m" if sec >= 3600 else f"{sec // 60}m{sec % 60:02d}s"

    def eta(self):
        el = time.monotonic() - self.t0
        if self.done == 0:
            return "?"
        return self.fmt(el / self.done * (self.total - self.done))

    def tick(self, label):
        self.done += 1
        if not self.tty and not self.quiet:
            # A log (make bench > log, CI): a line every 30 seconds.
            now = time.monotonic()
            if now - self.last >= 30:
                self.last = now
                sys.stderr.write(f"    ... [{self.done}/{self.total} runs, {self.fmt(now - self.t0)} elapsed, "
                                 f"eta {self.eta()}] {label}\n")
                sys.stderr.flush()
        elif self.tty:
            now = time.monotonic()
            if now - self.last > 0.2 or self.done == self.total:
                self.last = now
                line = (f"  [{self.done}/{self.total} runs, {self.fmt(now - self.t0)} elapsed, "
                        f"eta {self.eta()}] {label}")
                sys.stderr.write("\r" + line[:150].ljust(150))
                sys.stderr.flush()

    def line(self, text):
        if self.tty:
            sys.stderr.write("\r" + " " * 150 + "\r")
        if not self.quiet:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


# ----------------------------------------------------------------------------------------------
# Building and environment facts
# ----------------------------------------------------------------------------------------------
def build_workload_binaries(bins, log):
    """Compiles bench/workloads/*.c (and the launcher) into bins when out of date."""
    cc = os.environ.get("CC", "cc")
    cflags = shlex.split(os.environ.get("BENCH_CFLAGS", "-O2 -pthread"))
    src = os.path.join(BENCH_DIR, "workloads")
    os.makedirs(bins, exist_ok=True)
    header_mtime = os.path.getmtime(os.path.join(src, "common.h"))

    def stale(exe, c):
        return not os.path.exists(exe) or os.path.getmtime(exe) < max(os.path.getmtime(c), header_mtime)

    jobs = []
    for f in sorted(os.listdir(src)):
        if f.endswith(".c"):
            exe, c = os.path.join(bins, f[:-2]), os.path.join(src, f)
            if stale(exe, c):
                jobs.append([[cc] + cflags + ["-o", exe, c, "-ldl"]])
    launcher = os.path.join(bins, "launch")
    lsrc = os.path.join(HERE, "launch.c")
    if stale(launcher, lsrc):
        # Static when the toolchain allows: the launcher's own RSS is the floor of every peak RSS.
        jobs.append([[cc, "-O2", "-static", "-o", launcher, lsrc], [cc, "-O2", "-o", launcher, lsrc]])
    failed = False
    pending = [(alts, 0, subprocess.Popen(alts[0], stderr=subprocess.PIPE, text=True)) for alts in jobs]
    while pending:
        alts, k, p = pending.pop(0)
        _, err = p.communicate()
        if p.returncode != 0:
            if k + 1 < len(alts):
                pending.append((alts, k + 1, subprocess.Popen(alts[k + 1], stderr=subprocess.PIPE, text=True)))
                continue
            failed = True
            log(f"  build failed: {shlex.join(alts[k])}\n{err}")
    if jobs and not failed:
        log(f"  built {len(jobs)} program(s) with {cc} {' '.join(cflags)} into {bins}")
    LAUNCHER[0] = launcher
    static = None
    if shutil.which("file"):
        static = "statically linked" in subprocess.run(["file", "-L", launcher], capture_output=True,
                                                       text=True).stdout
    return not failed, {"cc": cc, "cflags": cflags, "cc_version": first_line([cc, "--version"]),
                        "launcher": launcher, "launcher_static": static}


def first_line(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_facts():
    cpu = None
    for line in read_file("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = re.search(r"MemTotal:\s+(\d+) kB", read_file("/proc/meminfo"))
    os_rel = re.search(r'PRETTY_NAME="([^"]+)"', read_file("/etc/os-release"))
    gov = read_file("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip() or None
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        glibc = None
    return {
        "hostname": platform.node(),
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "memory_mib": int(mem.group(1)) // 1024 if mem else None,
        "kernel": platform.release(),
        "os": os_rel.group(1) if os_rel else platform.platform(),
        "debian_version": read_file("/etc/debian_version").strip() or None,
        "arch": platform.machine(),
        "glibc": glibc,
        "cpufreq_governor": gov,
        "loadavg_at_start": read_file("/proc/loadavg").split()[:3],
        "runner_python": sys.version.split()[0],
    }


def git_info(path):
    def g(*args):
        try:
            r = subprocess.run(["git", "-C", path] + list(args), capture_output=True, text=True, timeout=20)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": g("rev-parse", "HEAD"), "describe": g("describe", "--always", "--dirty", "--tags")}


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_facts(path):
    """What identifies the library build under test: version, file, hash, git state."""
    info = {"path": path, "realpath": os.path.realpath(path)}
    try:
        st = os.stat(path)
        info["size"] = st.st_size
        info["mtime"] = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).isoformat()
        info["sha256"] = sha256_of(path)
    except OSError as e:
        info["error"] = str(e)
    version = os.environ.get("FASTMM5_VERSION")
    src = None
    if not version:
        m = re.search(r"AC_INIT\(\s*\[?[^,\]]*\]?\s*,\s*\[?([^,\]\)]+)",
                      read_file(os.path.join(SRCDIR, "configure.ac")))
        if m:
            version, src = m.group(1).strip(), "configure.ac"
    if not version:
        h = read_file(os.path.join(SRCDIR, "include", "fastmm5.h"))
        parts = [re.search(rf"#define FASTMM_VERSION_{k}\s+(\d+)", h) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            version, src = ".".join(p.group(1) for p in parts), "include/fastmm5.h"
    else:
        src = src or "FASTMM5_VERSION"
    info["version"] = version
    info["version_source"] = src
    soname = None
    if shutil.which("readelf"):
        r = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
        m = re.search(r"\(SONAME\).*\[(.+?)\]", r.stdout)
        soname = m.group(1) if m else None
    info["soname"] = soname
    info["git"] = git_info(SRCDIR)
    info["looks_like_fastmm5"] = "fastmm5" in os.path.basename(info["realpath"])
    return info


def find_fastmm5(args):
    if os.environ.get("FASTMM5_LIB"):
        return os.path.abspath(os.environ["FASTMM5_LIB"])
    roots = []
    if args.build:
        roots.append(os.path.abspath(args.build))
    roots += [SRCDIR, os.getcwd()]
    for r in roots:
        for rel in ("lib/.libs/libfastmm5.so", ".libs/libfastmm5.so", "lib/libfastmm5.so", "libfastmm5.so"):
            p = os.path.join(r, rel)
            if os.path.exists(p):
                return os.path.abspath(p)
    return None


def resolve_tools():
    tools = {}
    # The real python3 binary, not a wrapper script (a pyenv shim would put bash under the preload).
    for cand in ("/usr/bin/python3", shutil.which("python3")):
        if cand and os.path.exists(cand):
            try:
                exe = subprocess.run([cand, "-c", "import sys; print(sys.executable)"], capture_output=True,
                                     text=True, timeout=30).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                continue
            if exe and os.path.exists(exe):
                tools["python"] = os.path.realpath(exe)
                break
    for t in ("sort", "gcc"):
        p = shutil.which(t)
        if p:
            tools[t] = os.path.realpath(p)
    return tools


def tool_versions(tools):
    return {k: first_line([v, "--version"]) for k, v in tools.items()}


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB_PREFIXES)}
    env["LC_ALL"] = "C"
    return env


# ----------------------------------------------------------------------------------------------
# The benchmark proper
# ----------------------------------------------------------------------------------------------
def shell_command(variant, argv, wl_env):
    env = dict(wl_env)
    env.update(variant.set_env())
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join(parts + [shlex.join(variant.prefix + argv)])


def probe_variants(variants, bins, scratch, log, env0):
    """Runs bench/workloads/probe.c under each variant; marks unusable ones unavailable."""
    probe = os.path.join(bins, "probe")
    facts = {}
    for v in variants:
        if not v.available:
            continue
        r = run_process(v.prefix + [probe], v.set_env(), "internal", 60, None, scratch, env0)
        if not r.ok:
            v.available = False
            v.note = f"probe failed: {r.error}"
            log(f"  {v.name}: unusable: {r.error}")
            continue
        facts[v.name] = r.extra
        frm = str(r.extra.get("malloc_from", ""))
        if v.preload and not v.prefix:
            in_effect = os.path.realpath(frm) == os.path.realpath(v.preload)
        else:
            in_effect = not v.verify_malloc or v.verify_malloc in frm
        if not in_effect:
            v.available = False
            v.note = f"preload not in effect (malloc resolves to {frm})"
            log(f"  {v.name}: {v.note}")
        if v.role == "fastmm5-debug" and r.extra.get("fastmm_debug_active") != 1:
            state = r.extra.get("fastmm_debug_active")
            v.note = ("FASTMM5_DEBUG=1 set, but fastmm_debug_active() "
                      + ("is not exported" if state == "absent" else "returned false")
                      + ": debug mode may not be in effect")
            log(f"  {v.name}: note: {v.note}")
    return facts


def workload_plan(wl, baseline, candidates, quick):
    """The comparisons of one workload: each candidate with its amount of work and its command
    (the baseline runs the same command in those pairs)."""
    work = wl.work_quick if quick else wl.work_full
    plan = []
    for c in candidates:
        w = max(1, work // c.divisor) if c.divisor > 1 else work
        argv = wl.argv(w)
        plan.append({"candidate": c, "work": w, "argv": argv})
    return plan


def pin_cpu(wl, pin):
    if pin == "none" or wl.timing != "internal" or wl.threads != 1:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1] if allowed else None


def run_workload(wl, baseline, candidates, args, env0, scratch, progress):
    """Runs one workload's comparisons: warm-up pairs, then measured pairs, interleaved
    across candidates (pair i of every comparison before pair i+1 of any)."""
    plan = workload_plan(wl, baseline, candidates, args.quick)
    cpu = pin_cpu(wl, args.pin)
    comps = []
    for p in plan:
        c = p["candidate"]
        b_env = dict(wl.env, **baseline.set_env())
        c_env = dict(wl.env, **c.set_env())
        comps.append({
            "baseline": baseline.name, "candidate": c.name, "work": p["work"], "divisor": c.divisor,
            "commands": {"baseline": shell_command(baseline, p["argv"], wl.env),
                         "candidate": shell_command(c, p["argv"], wl.env)},
            "_argv_b": baseline.prefix + p["argv"], "_argv_c": c.prefix + p["argv"],
            "_env_b": b_env, "_env_c": c_env,
            "status": "ok", "note": "", "warmups": [], "pairs": [],
        })
    failed_baseline = None
    for stage, count in (("warmups", args.warmups), ("pairs", args.pairs)):
        for i in range(count):
            for cm in comps:
                if cm["status"] != "ok":
                    continue
                label = f"{wl.name}: {stage[:-1]} {i + 1}/{count} {cm['baseline']} vs {cm['candidate']}"
                rb = run_process(cm["_argv_b"], cm["_env_b"], wl.timing, args.timeout, cpu, scratch, env0)
                progress.tick(label)
                if not rb.ok:
                    failed_baseline = f"baseline {cm['baseline']} failed: {rb.error}"
                    cm["status"] = "failed"
                    cm["note"] = failed_baseline
                    continue
                rc = run_process(cm["_argv_c"], cm["_env_c"], wl.timing, args.timeout, cpu, scratch, env0)
                progress.tick(label)
                if not rc.ok:
                    cm["status"] = "failed"
                    cm["note"] = f"{cm['candidate']} failed: {rc.error}"
                    progress.line(f"    {wl.name}: {cm['note']}")
                    continue
                chk_b, chk_c = rb.extra.get("check"), rc.extra.get("check")
                if chk_b is not None and chk_b != chk_c:
                    cm["status"] = "failed"
                    cm["note"] = (f"{cm['candidate']} computed a different result (check={chk_c}, "
                                  f"baseline check={chk_b})")
                    progress.line(f"    {wl.name}: {cm['note']}")
                    continue
                cm[stage].append({"b": rb.sample(), "c": rc.sample()})
            if failed_baseline:
                break
        if failed_baseline:
            break
    # Runs left unexecuted are removed from the progress total.
    return comps, failed_baseline


def summarise_comparison(cm):
    if cm["status"] != "ok" or not cm["pairs"]:
        return
    pairs = cm["pairs"]
    bt = [p["b"]["time_s"] for p in pairs]
    ct = [p["c"]["time_s"] for p in pairs]
    br = [p["b"]["maxrss_kb"] for p in pairs]
    cr = [p["c"]["maxrss_kb"] for p in pairs]
    cm["time_ratio"] = stats.paired_ratio_stats(bt, ct)
    cm["rss_ratio"] = stats.paired_ratio_stats(br, cr, invert=True)
    cm["gain"] = cm["time_ratio"]["median"] - 1 if cm["time_ratio"]["median"] else None
    cm["median"] = {"baseline_time_s": stats.median(bt), "candidate_time_s": stats.median(ct),
                    "baseline_maxrss_kb": stats.median(br), "candidate_maxrss_kb": stats.median(cr)}
    ext = {}
    for side in ("b", "c"):
        keys = set()
        for p in pairs:
            keys |= set(p[side].get("extra", {}))
        for k in sorted(keys):
            vals = [p[side].get("extra", {}).get(k) for p in pairs]
            nums = [v for v in vals if isinstance(v, (int, float))]
            if len(nums) == len(vals):
                ext.setdefault(k, {})["baseline" if side == "b" else "candidate"] = stats.median(nums)
            elif vals and all(v == vals[0] for v in vals):
                ext.setdefault(k, {})["baseline" if side == "b" else "candidate"] = vals[0]
    cm["extra_medians"] = ext


def summary_geomeans(results, groups):
    """Geometric means of the per-workload medians of paired ratios, per candidate."""
    out = {}
    for wl in results["workloads"]:
        if wl["group"] not in groups:
            continue
        for cm in wl["comparisons"]:
            if cm["status"] != "ok" or not cm.get("time_ratio", {}).get("median"):
                continue
            d = out.setdefault(cm["candidate"], {"time": [], "rss": [], "workloads": []})
            d["time"].append(cm["time_ratio"]["median"])
            d["rss"].append(cm["rss_ratio"]["median"])
            d["workloads"].append(wl["name"])
    return {k: {"time_ratio_geomean": stats.geomean(v["time"]), "rss_ratio_geomean": stats.geomean(v["rss"]),
                "n": len(v["time"]), "workloads": v["workloads"]} for k, v in out.items()}


def best_peer_gaps(results, primary, peers):
    """Per workload: the primary candidate's time ratio against the best peer's (both vs the
    baseline, from their own pairs): gap = ratio(primary) / ratio(best peer) - 1."""
    gaps = {}
    for wl in results["workloads"]:
        ratios = {cm["candidate"]: cm["time_ratio"]["median"] for cm in wl["comparisons"]
                  if cm["status"] == "ok" and cm.get("time_ratio", {}).get("median")}
        prim = next((p for p in primary if p in ratios), None)
        cands = {p: r for p, r in ratios.items() if p in peers}
        if prim is None or not cands:
            continue
        best = max(cands, key=cands.get)
        gaps[wl["name"]] = {"primary": prim, "best_peer": best, "primary_ratio": ratios[prim],
                            "best_peer_ratio": cands[best], "gap": ratios[prim] / cands[best] - 1}
    return gaps


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/run.sh",
        description="libfastmm5 benchmark harness: alternating fresh-process pairs against a baseline "
                    "(glibc, or build A with --compare); see bench/README.md.")
    ap.add_argument("--quick", action="store_true",
                    help="CI mode: 3 pairs after 1 warm-up, tiny work, a subset of workloads, installed peers only")
    ap.add_argument("--build", metavar="DIR", help="build directory holding lib/.libs/libfastmm5.so")
    ap.add_argument("--lib", metavar="SO", help="libfastmm5 shared object (overrides $FASTMM5_LIB; default: $FASTMM5_LIB, else found under --build DIR, the source tree or the current directory)")
    ap.add_argument("--compare", nargs=2, metavar=("A.so", "B.so"),
                    help="compare two builds of the library: A is the baseline, B the candidate")
    ap.add_argument("--labels", metavar="A,B", help="names of the two builds in --compare mode (default A,B)")
    ap.add_argument("--env-a", action="append", default=[], metavar="K=V", help="extra environment for build A")
    ap.add_argument("--env-b", action="append", default=[], metavar="K=V", help="extra environment for build B")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only workloads whose name or group matches (fnmatch, comma-separated, repeatable)")
    ap.add_argument("--peers", metavar="LIST", help="only these candidates (comma-separated variant names)")
    ap.add_argument("--skip", metavar="LIST", default="", help="leave out these candidates (comma-separated)")
    ap.add_argument("--pairs", type=int, help="measured pairs per comparison (default 25; quick 3)")
    ap.add_argument("--warmups", type=int, help="warm-up pairs per comparison (default 3; quick 1)")
    ap.add_argument("--timeout", type=float, help="seconds before one process is killed (default 300; quick 30)")
    ap.add_argument("--pin", choices=["auto", "none"], default="auto",
                    help="auto: pin single-threaded micro workloads to the last allowed CPU (default)")
    ap.add_argument("--install", dest="install", action="store_true", default=None,
                    help="install missing peers with apt-get (default in full mode when root)")
    ap.add_argument("--no-install", dest="install", action="store_false", help="never run apt-get")
    ap.add_argument("--workdir", metavar="DIR", help="binaries, generated inputs, scratch (default bench/out)")
    ap.add_argument("--output", metavar="PREFIX",
                    help="write PREFIX.md and PREFIX.json (default: bench/RESULTS for a complete full run, "
                         "else WORKDIR/<mode>)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the commands that would run and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    args = ap.parse_args(argv)
    m = QUICK if args.quick else FULL
    args.pairs = m["pairs"] if args.pairs is None else args.pairs
    args.warmups = m["warmups"] if args.warmups is None else args.warmups
    args.timeout = m["timeout"] if args.timeout is None else args.timeout
    if args.pairs < 1 or args.warmups < 0:
        ap.error("--pairs must be >= 1 and --warmups >= 0")
    if args.install is None:
        args.install = not args.quick and not args.compare
    return args


def invocation(argv):
    """The command as the user could retype it, with the environment the harness reads."""
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in ("FASTMM5_LIB", "FASTMM5_VERSION", "CC", "BENCH_CFLAGS")
           if os.environ.get(k)]
    return " ".join(env + [shlex.join([os.environ.get("BENCH_ENTRY", "bench/harness/runner.py")] + argv)])


def kv_list(items):
    out = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"bad K=V: {it}")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def select(workloads, args):
    pats = [p.strip() for item in args.only for p in item.split(",") if p.strip()]
    if pats:
        sel = [w for w in workloads if any(fnmatch.fnmatch(w.name, p) or w.group == p for p in pats)]
    elif args.quick:
        sel = [w for w in workloads if w.quick]
    else:
        sel = list(workloads)
    return sel, pats


def main(argv):
    args = parse_args(argv)
    t_start = time.monotonic()
    log = (lambda s: None) if args.quiet else (lambda s: (sys.stderr.write(s + "\n"), sys.stderr.flush()))
    mode = "compare" if args.compare else "quick" if args.quick else "full"

    workdir = os.path.abspath(args.workdir or (os.path.join(args.build, "bench", "out") if args.build
                                               else os.path.join(BENCH_DIR, "out")))
    bins = os.path.join(workdir, "bin")
    scratch = os.path.join(workdir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    tools = resolve_tools()
    workloads = build_workloads(bins, tools, os.path.join(workdir, "inputs"))
    os.makedirs(os.path.join(workdir, "inputs"), exist_ok=True)
    selected, patterns = select(workloads, args)

    if args.list:
        for w in workloads:
            work = w.work_quick if args.quick else w.work_full
            print(f"{w.name:28} {w.group:8} {'quick' if w.quick else '-':5} work={str(work):<12} {w.description}")
        return 0
    if not selected:
        log(f"no workload matches {patterns}; use --list")
        return 2

    log(f"libfastmm5 benchmark: {mode} mode, {len(selected)} workload(s), {args.pairs} pairs after "
        f"{args.warmups} warm-up pair(s) per comparison")
    ok, build_info = build_workload_binaries(bins, log)
    if not ok:
        return 2
    env0 = base_env()

    # Variants.
    normal_candidates, debug_candidates = [], []
    library = None
    # The candidates --peers names (None: all) and those --skip leaves out, parsed once: read by
    # the low-memory opt-in, the peer filter (wanted) and usable() below.
    want = {p.strip() for p in args.peers.split(",")} if args.peers else None
    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    if args.compare:
        la, lb = (args.labels.split(",", 1) if args.labels else ["A", "B"])
        paths = [os.path.abspath(p) for p in args.compare]
        for p in paths:
            if not os.path.exists(p):
                log(f"no such library: {p}")
                return 2
        baseline = Variant(la, f"{la} ({paths[0]})", "compare", preload=paths[0], env=kv_list(args.env_a))
        cand = Variant(lb, f"{lb} ({paths[1]})", "compare", preload=paths[1], env=kv_list(args.env_b))
        debug_base = Variant(la, baseline.title, "compare", preload=paths[0],
                             env=dict(baseline.env, FASTMM5_DEBUG="1", FASTMM5_STACK_DEPTH="0"))
        debug_cand = Variant(lb, cand.title, "compare", preload=paths[1],
                             env=dict(cand.env, FASTMM5_DEBUG="1", FASTMM5_STACK_DEPTH="0"))
        library = {"A": library_facts(paths[0]), "B": library_facts(paths[1])}
        normal_candidates, debug_candidates = [cand], [debug_cand]
        all_variants = [baseline, cand, debug_base, debug_cand]
        debug_variants = [debug_base, debug_cand]
        primary, peers = [lb], []
    else:
        lib = os.path.abspath(args.lib) if args.lib else find_fastmm5(args)
        if not lib or not os.path.exists(lib):
            log("libfastmm5.so not found: build the library first, or set FASTMM5_LIB=/path/to/libfastmm5.so "
                "(or pass --build DIR / --lib SO)")
            return 2
        library = library_facts(lib)
        if not library["looks_like_fastmm5"]:
            log(f"  note: {lib} does not look like libfastmm5 (a stand-in?); the report will say so")
        baseline = Variant("glibc", f"glibc {os.confstr('CS_GNU_LIBC_VERSION').split()[-1]} (no preload)",
                           "baseline", verify_malloc="libc.so")
        debug_base = baseline
        fm = Variant("fastmm5", "libfastmm5", "fastmm5", preload=lib, version=library.get("version"))
        # Debug mode is measured with stack traces off (the seeds' method: fills and checks only)
        # and, as a second row, with FastMM5's default depth of 20.
        fmd = Variant("fastmm5-debug", "libfastmm5 in debug mode, stack traces off (FASTMM5_STACK_DEPTH=0)",
                      "fastmm5-debug", preload=lib, env={"FASTMM5_DEBUG": "1", "FASTMM5_STACK_DEPTH": "0"},
                      version=library.get("version"))
        fmd20 = Variant("fastmm5-debug-st20", "libfastmm5 in debug mode, stack traces of depth 20",
                        "fastmm5-debug", preload=lib, env={"FASTMM5_DEBUG": "1", "FASTMM5_STACK_DEPTH": "20"},
                        version=library.get("version"))
        # FastMM5's low-memory strategy (no kept large mappings, smaller medium spans, empty spans
        # given back at once): opt-in, by naming it in --peers with the others wanted
        # (--peers fastmm5,fastmm5-low-memory), to show what the default's speed costs in RSS.
        fml = Variant("fastmm5-low-memory", "libfastmm5 with FASTMM5_STRATEGY=low-memory", "fastmm5",
                      preload=lib, env={"FASTMM5_STRATEGY": "low-memory"}, version=library.get("version"))
        # Guarded blocks, opt-in the same way: every block guarded in debug mode (beside Electric
        # Fence and DUMA on the debug workloads), and one allocation in 5000 in normal mode.
        fmg = Variant("fastmm5-guard", "libfastmm5 in debug mode, every block guarded (FASTMM5_GUARD=all)",
                      "fastmm5-debug", preload=lib, env={"FASTMM5_DEBUG": "1", "FASTMM5_GUARD": "all"},
                      version=library.get("version"))
        fms = Variant("fastmm5-sample", "libfastmm5 guarding one allocation in 5000 (FASTMM5_GUARD=sample:5000)",
                      "fastmm5", preload=lib, env={"FASTMM5_GUARD": "sample:5000"}, version=library.get("version"))
        optional = [v for v in (fml, fms) if want and v.name in want]
        debug_optional = [fmg] if want and fmg.name in want else []
        logfile = os.path.join(workdir, "apt.log")
        groups = {w.group for w in selected}
        wanted = lambda n: (want is None or n in want) and n not in skip  # noqa: E731
        peer_vs = peer_variants(PEER_TABLE, args.install, log, logfile, wanted) \
            if groups & {"micro", "general", "real"} else []
        dpeer_vs = peer_variants(DEBUG_PEER_TABLE, args.install, log, logfile, wanted) \
            if "debug" in groups else []
        normal_candidates = [fm] + optional + peer_vs if groups & {"micro", "general", "real"} else []
        debug_candidates = [fmd, fmd20] + debug_optional + dpeer_vs if "debug" in groups else []
        all_variants = [baseline] + normal_candidates + debug_candidates
        debug_variants = debug_candidates
        primary = ["fastmm5", "fastmm5-debug", "fastmm5-debug-st20"]
        peers = [v.name for v in peer_vs + dpeer_vs]

    def usable(vs):
        out = []
        for v in vs:
            if want is not None and v.name not in want:
                v.available = False
                v.note = v.note or "left out (--peers)"
            if v.name in skip:
                v.available = False
                v.note = "left out (--skip)"
            if args.quick and v.slow_start and not (want and v.name in want):
                v.available = False
                v.note = "left out of quick mode (about 1 s of start-up per process); --peers includes it"
            if v.available:
                out.append(v)
        return out

    normal_candidates = usable(normal_candidates)
    debug_candidates = usable(debug_candidates)

    if args.dry_run:
        for w in selected:
            cands = debug_candidates if w.group == "debug" else normal_candidates
            base = debug_base if w.group == "debug" else baseline
            for p in workload_plan(w, base, cands, args.quick):
                print(f"{w.name}: {shell_command(base, p['argv'], w.env)}")
                print(f"{w.name}: {shell_command(p['candidate'], p['argv'], w.env)}")
        return 0

    probes = probe_variants([v for v in all_variants if v.available], bins, scratch, log, env0)
    for v in all_variants:
        if v.available:
            log(f"  {v.name:14} {v.title}" + "".join(f", {k}={val}" for k, val in v.env.items())
                + (f"  [{v.note}]" if v.note else "")
                + (f"  (1/{v.divisor} work)" if v.divisor > 1 else ""))
        else:
            log(f"  {v.name:14} skipped: {v.note}")
    if not baseline.available:
        log("the baseline is unusable; stopping")
        return 1
    broken = [v for v in normal_candidates + debug_candidates
              if not v.available and v.name in primary and v.note.startswith(("probe failed", "preload not"))]
    if broken:
        log("the library under test is unusable: " + "; ".join(f"{v.name}: {v.note}" for v in broken))
        return 1
    normal_candidates = [v for v in normal_candidates if v.available]
    debug_candidates = [v for v in debug_candidates if v.available]

    # Inputs for real programs are generated before any timing starts.
    for w in selected:
        if w.group == "real":
            w.argv(w.work_quick if args.quick else w.work_full)

    slow_seen = set()
    cand_lists = []
    for w in selected:
        cs = debug_candidates if w.group == "debug" else normal_candidates
        if args.quick:
            # A slow-starting variant (Valgrind: about a second per process) is left out of quick
            # mode unless --peers names it (usable() above), and then runs in its first workload.
            keep = [c for c in cs if not c.slow_start or c.name not in slow_seen]
            slow_seen |= {c.name for c in cs if c.slow_start}
            cs = keep
        cand_lists.append(cs)

    def cands_for(w):
        return cand_lists[selected.index(w)]

    planned = [2 * (args.warmups + args.pairs) * len(cands_for(w)) for w in selected]
    progress = Progress(sum(planned), args.quiet)
    results = {
        "schema": SCHEMA,
        "mode": mode,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "invocation": invocation(argv),
        "machine": machine_facts(),
        "library": library,
        "build": build_info,
        "tools": {"paths": tools, "versions": tool_versions(tools)},
        "method": {
            "pairs": args.pairs, "warmup_pairs": args.warmups, "timeout_s": args.timeout, "pin": args.pin,
            "pair_order": "baseline first, then candidate, each a fresh process; pair i of every "
                          "comparison of a workload runs before pair i+1 of any",
            "time_ratio": "baseline time / candidate time per pair (above 1: candidate faster)",
            "rss_ratio": "candidate peak RSS / baseline peak RSS per pair (below 1: candidate smaller)",
            "statistic": "median of the paired ratios (statistics.median); gain = median - 1",
            "bootstrap": {"resamples": stats.BOOTSTRAP_RESAMPLES, "seed": stats.BOOTSTRAP_SEED,
                          "rng": "Python random.Random(seed), a fresh one per statistic",
                          "resampling": "n pairs drawn with replacement, index = rng.randrange(n), n times",
                          "interval": "percentile, nearest rank: sorted medians at 1-based ranks "
                                      "ceil(0.025*N) and ceil(0.975*N)",
                          "level": 0.95},
            "timing": "internal: the workload's own CLOCK_MONOTONIC time of its measured loop; "
                      "wall: the process from spawn to wait4 (real programs)",
            "peak_rss": "ru_maxrss (KiB) from wait4 of the child, its waited-for descendants included",
        },
        "variants": [dict(v.to_json(), used_for="debug" if v in debug_variants else "normal")
                     for v in all_variants],
        "probes": probes,
        "primary": primary,
        "peers": peers,
        "baseline": baseline.name,
        "selection": {"patterns": patterns, "complete": not patterns and mode == "full"},
        "workloads": [],
        "status": "running",
    }
    critical = set(primary)
    failures = []
    interrupted = False
    try:
        for idx, w in enumerate(selected, 1):
            base = debug_base if w.group == "debug" else baseline
            cands = cands_for(w)
            progress.line(f"[{idx}/{len(selected)}] {w.name} ({w.group}): {base.name} vs "
                          f"{', '.join(c.name for c in cands) or 'nothing'}"
                          + (f"  [{Progress.fmt(time.monotonic() - t_start)} so far]" if not progress.tty else ""))
            comps, failed_base = run_workload(w, base, cands, args, env0, scratch, progress)
            # Runs not made (a failed comparison stops early) come off the progress total.
            progress.total = progress.done + sum(planned[idx:])
            for cm in comps:
                summarise_comparison(cm)
                for k in [k for k in cm if k.startswith("_")]:
                    del cm[k]
            wl_json = {"name": w.name, "group": w.group, "description": w.description, "threads": w.threads,
                       "timing": w.timing, "pinned_cpu": pin_cpu(w, args.pin),
                       "columns": w.columns, "comparisons": comps}
            if failed_base:
                wl_json["error"] = failed_base
                failures.append(f"{w.name}: {failed_base}")
            for cm in comps:
                if cm["status"] != "ok" and cm["candidate"] in critical and not failed_base:
                    failures.append(f"{w.name}: {cm['note']}")
            results["workloads"].append(wl_json)
            progress.line("    " + "; ".join(
                f"{cm['candidate']} {report.fmt_num(cm['time_ratio']['median'])}x" if cm["status"] == "ok"
                else f"{cm['candidate']} FAILED" for cm in comps))
    except KeyboardInterrupt:
        interrupted = True
        progress.line("interrupted: writing what was measured so far")

    results["status"] = "interrupted" if interrupted else "complete"
    results["failures"] = failures
    results["summary"] = {
        "general_and_real": summary_geomeans(results, {"general", "real"}),
        "micro": summary_geomeans(results, {"micro"}),
        "debug": summary_geomeans(results, {"debug"}),
        "best_peer_gaps": best_peer_gaps(results, primary, peers),
    }
    results["elapsed_s"] = round(time.monotonic() - t_start, 1)

    # A complete full run's table becomes bench/RESULTS.md; its raw samples stay out of the
    # source tree (the work directory; published runs go to the bench-data branch).
    json_path = None
    if args.output:
        prefix = os.path.abspath(args.output)
    elif mode == "full" and results["selection"]["complete"] and not interrupted and not args.peers \
            and not args.skip and args.pairs == FULL["pairs"] and args.warmups == FULL["warmups"] \
            and os.access(BENCH_DIR, os.W_OK):
        prefix = os.path.join(BENCH_DIR, "RESULTS")
        json_path = os.path.join(workdir, "RESULTS.json")
    else:
        prefix = os.path.join(workdir, mode + ("-partial" if patterns or interrupted else ""))
    json_path = json_path or prefix + ".json"
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    results["outputs"] = {"markdown": prefix + ".md", "json": json_path}
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    with open(prefix + ".md", "w") as f:
        f.write(report.render(results, json_name=os.path.basename(json_path)))
    log(f"results: {prefix}.md and {json_path} ({Progress.fmt(results['elapsed_s'])})")
    if failures:
        log("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
