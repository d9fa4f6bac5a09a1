#!/bin/sh
# preload-programs.sh - real programs run on libfastmm5 through LD_PRELOAD behave exactly as on
# the system allocator, and the usage report proves libfastmm5 served them.
#
# Each program runs twice from the same directory with the same input: plainly, then with
# LD_PRELOAD=lib/.libs/libfastmm5.so FASTMM5_STATS=1. Their exit status, standard output and
# (for gcc) the object file written must be identical, and standard error of the preloaded run
# must hold at least one usage report ("libfastmm5 usage report" ... "allocations served: N"),
# every one of them with N > 0.
#
# Guards against: interposition that silently does not happen (versioned or hidden malloc,
# a missing alias such as __libc_memalign or malloc_usable_size), wrong realloc/calloc/aligned
# results that corrupt a real program's data, crashes or hangs at start-up (allocation before
# the library initialised), at exit, across fork/exec (gcc's driver) or with threads (sort).
#
# Programs: python3 (a pure-Python workload), sort (a generated 200k-line file), gcc -O2 -c (a
# generated C file), ls -la /usr/bin. One that is not installed is skipped (SKIP), the rest still
# run. FM_PRELOAD_SCALE (1 in make check, 5 in make check-long) multiplies the python3 workload
# (50k items) and the functions of the C file (60; gcc -O2 takes about 3 s for them here).
# Exit status: 0 pass, 1 fail, 77 all skipped (or no shared library), 99 hard error.
set -u
scale=${FM_PRELOAD_SCALE:-1}
case $scale in
    '' | *[!0-9]* | 0) echo "ERROR: FM_PRELOAD_SCALE=$scale: expected a positive number"; exit 99 ;;
esac

top_builddir=${top_builddir:-.}
so=$top_builddir/lib/.libs/libfastmm5.so
case $so in
    /*) ;;
    *) so=`pwd`/$so ;;
esac
if ! test -e "$so"; then
    echo "SKIP: $so not built (configured with --disable-shared?)"
    exit 77
fi

work=`mktemp -d "${TMPDIR:-/tmp}/fastmm5-preload.XXXXXX"` || exit 99
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work" || exit 99

# Same locale, hash seed and allocator-free environment for both runs.
LC_ALL=C
PYTHONHASHSEED=0
export LC_ALL PYTHONHASHSEED
unset LD_PRELOAD FASTMM5_STATS FASTMM5_LOG FASTMM5_ON_ERROR 2>/dev/null || true

# A hang under the allocator must fail the test, not the CI job.
if command -v timeout >/dev/null 2>&1; then
    limit="timeout -k 10 300"
else
    limit=
fi

passed=0
failed=0
skipped=0

# run_case NAME PROG PRODUCT CMD...: runs CMD plainly and preloaded, or skips it when PROG is
# not installed. PRODUCT is a file CMD writes (compared too; "-" for none); FM_OUT in CMD's
# environment names where to write it.
run_case() {
    name=$1 prog=$2 product=$3
    shift 3
    if ! command -v "$prog" >/dev/null 2>&1; then
        echo "SKIP: $name ($prog is not installed)"
        skipped=`expr $skipped + 1`
        return 0
    fi
    $limit env FM_OUT="$work/$name.plain.product" "$@" \
        > "$name.plain.out" 2> "$name.plain.err"
    plain_rc=$?
    $limit env FM_OUT="$work/$name.preload.product" LD_PRELOAD="$so" FASTMM5_STATS=1 "$@" \
        > "$name.preload.out" 2> "$name.preload.err"
    preload_rc=$?

    ok=yes
    if test $plain_rc -ne 0; then
        echo "ERROR: $name fails even without libfastmm5 (exit $plain_rc):"
        sed 's/^/  | /' "$name.plain.err" | head -n 20
        ok=no
    fi
    if test $preload_rc -ne $plain_rc; then
        echo "FAIL: $name exits $preload_rc under LD_PRELOAD, $plain_rc without"
        ok=no
    fi
    if ! cmp -s "$name.plain.out" "$name.preload.out"; then
        echo "FAIL: $name: standard output differs under LD_PRELOAD:"
        diff "$name.plain.out" "$name.preload.out" | head -n 20
        ok=no
    fi
    if test "$product" != - && ! cmp "$work/$name.plain.product" "$work/$name.preload.product"; then
        echo "FAIL: $name: $product differs under LD_PRELOAD"
        ok=no
    fi
    check_reports "$name" || ok=no

    if test $ok = yes; then
        shown=`echo "$served" | cut -d, -f1-4`
        test "$shown" = "$served" || shown="$shown, ..."
        echo "PASS: $name (same output; $reports usage report(s), allocations served: $shown)"
        passed=`expr $passed + 1`
    else
        echo "  stderr under LD_PRELOAD (last lines):"
        tail -n 30 "$name.preload.err" | sed 's/^/  | /'
        failed=`expr $failed + 1`
    fi
}

# check_reports NAME: every usage report in NAME.preload.err shows allocations served > 0.
# Sets $reports (how many) and $served (their counts, comma-separated).
check_reports() {
    reports=`grep -c '^libfastmm5 usage report' "$1.preload.err"`
    served=`sed -n 's/^[[:space:]]*allocations served:[[:space:]]*\([0-9][0-9,]*\).*/\1/p' \
        "$1.preload.err" | tr -d , | tr '\n' ' ' | sed 's/ $//; s/ /, /g'`
    if test "$reports" -eq 0; then
        echo "FAIL: $1: no 'libfastmm5 usage report' on standard error: the library was not loaded or FASTMM5_STATS=1 ignored"
        return 1
    fi
    nserved=`grep -c '^[[:space:]]*allocations served:' "$1.preload.err"`
    if test "$nserved" -ne "$reports"; then
        echo "FAIL: $1: $reports usage report(s) but $nserved 'allocations served:' line(s)"
        return 1
    fi
    for n in `echo "$served" | tr -d ,`; do
        if test "$n" -eq 0; then
            echo "FAIL: $1: a usage report shows allocations served: 0 (malloc was not interposed)"
            return 1
        fi
    done
    return 0
}

# --- Inputs -----------------------------------------------------------------------------------

# 200,000 lines of pseudo-random keys and words (a fixed LCG, so every run sorts the same file).
awk 'BEGIN {
    x = 12345
    for (i = 0; i < 200000; i++) {
        x = (x * 1103515245 + 12345) % 2147483648
        w = ""
        for (j = 0; j < 1 + x % 9; j++) w = w substr("abcdefghijklmnopqrstuvwxyz", 1 + (x + j * 7) % 26, 1)
        printf "%s %010d line%d\n", w, x, i
    }
}' > sort.in || exit 99

# A C file with enough functions and loops to make gcc -O2 allocate.
awk -v functions=`expr 60 \* $scale` 'BEGIN {
    print "#include <stddef.h>"
    for (f = 0; f < functions; f++) {
        printf "struct s%d { int a[%d]; double d; struct s%d *next; };\n", f, 1 + f % 13, f
        printf "int f%d(struct s%d *p, int n) {\n  int r = %d;\n", f, f, f
        print  "  for (int i = 0; i < n; i++) {"
        printf "    switch ((i + r) %% 7) {\n"
        for (c = 0; c < 7; c++) printf "    case %d: r = r * %d + p->a[i %% %d]; break;\n", c, c + 3, 1 + f % 13
        print  "    }"
        print  "    if (p->next && r > 1000) r -= (int)p->next->d;"
        print  "  }"
        print  "  return r;\n}"
    }
}' > gen.c || exit 99

# --- Programs -----------------------------------------------------------------------------------

FM_N=`expr 50000 \* $scale`
export FM_N
run_case python3 python3 - python3 -c '
import hashlib, os
n = int(os.environ["FM_N"])
d = {}
for i in range(n):
    d["k%d" % i] = [i, str(i) * (i % 7), (i * 7919) % 200003]
items = sorted(d.items(), key=lambda kv: (kv[1][2], kv[0]))
words = sorted("w%x" % ((i * 2654435761) % 4294967296) for i in range(n))
text = " ".join(words)
parts = text.split(" ")
h = hashlib.sha256()
for k, v in items[::97]:
    h.update(k.encode())
    h.update(v[1].encode())
chunks = [bytearray(i % 5000) for i in range(20000)]
grown = []
for i in range(2000):
    grown.append("x" * i)
    grown[-1] += "y" * (i % 300)
print(len(d), len(parts), items[0][0], items[-1][0], h.hexdigest())
print(sum(len(b) for b in chunks), sum(map(len, grown)), parts[0], parts[-1])
'

if sort --parallel=2 -S 16M < /dev/null > /dev/null 2>&1; then
    run_case sort sort - sort --parallel=4 -S 16M -k1,1 -k2,2n sort.in
else
    run_case sort sort - sort -k1,1 -k2,2n sort.in
fi

run_case gcc gcc gen.o sh -c 'exec gcc -O2 -c gen.c -o "$FM_OUT"'

run_case ls ls - ls -la /usr/bin

echo "preload-programs: $passed passed, $failed failed, $skipped skipped"
if test $failed -gt 0; then
    exit 1
fi
if test $passed -eq 0; then
    exit 77
fi
exit 0
