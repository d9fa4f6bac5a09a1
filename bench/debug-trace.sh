#!/bin/sh
# debug-trace.sh - what debug mode's stack traces cost: bench/debug-trace.c's 4 KiB
# malloc/free loop from a 3-deep and a 25-deep call chain, in debug mode without traces
# (FASTMM5_STACK_DEPTH=0), with the default 20-entry traces, with libunwind's unw_backtrace as
# the capture (if the program was built with it), with a second libfastmm5 to compare (LIBGCC_SO:
# a build whose capture is libgcc's _Unwind_Backtrace), and under Valgrind memcheck (glibc's
# malloc, memcheck's own traces). Every round runs each column once in a fresh process, in turn;
# the table gives the median ns per pair, the ratio to the traceless loop and, for the traced
# columns, ns per captured frame: (traced - traceless) / (2 traces x 20 frames), and, where
# Valgrind ran, Valgrind's time over the traced column's, as the median of the per-round
# ratios (each round's processes ran back to back, so a round shares the machine's load).
# Times are the loop thread's CPU time (DEBUG_TRACE_CLOCK=cpu, the default here; =wall for the
# monotonic clock): on a shared machine the wall clock also counts other processes' turns.
#
# Usage: bench/debug-trace.sh [LIBFASTMM5_SO [ROUNDS]]; ITERATIONS (200000), VALGRIND_ITERATIONS
# (20000), LIBGCC_SO, BIN (the program; built here from bench/debug-trace.c when unset).
set -eu
DEBUG_TRACE_CLOCK=${DEBUG_TRACE_CLOCK:-cpu}
export DEBUG_TRACE_CLOCK
so=${1:-lib/.libs/libfastmm5.so}
rounds=${2:-7}
iters=${ITERATIONS:-200000}
viters=${VALGRIND_ITERATIONS:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$(dirname "$0")/debug-trace.c
bin=${BIN:-}
unwind=no
if [ -z "$bin" ]; then
    bin=$tmp/debug-trace
    if ${CC:-cc} -O2 -g -DWITH_LIBUNWIND -o "$bin" "$src" -lunwind 2>/dev/null; then
        unwind=yes
    else
        ${CC:-cc} -O2 -g -o "$bin" "$src"
    fi
fi
have_valgrind=no
command -v valgrind >/dev/null 2>&1 && have_valgrind=yes

run() { # column depth -> ns per pair
    case $1 in
    none) env LD_PRELOAD="$so" FASTMM5_DEBUG=1 FASTMM5_STACK_DEPTH=0 "$bin" "$2" "$iters" ;;
    traces) env LD_PRELOAD="$so" FASTMM5_DEBUG=1 "$bin" "$2" "$iters" ;;
    libgcc) env LD_PRELOAD="$LIBGCC_SO" FASTMM5_DEBUG=1 "$bin" "$2" "$iters" ;;
    libunwind) env LD_PRELOAD="$so" FASTMM5_DEBUG=1 DEBUG_TRACE_CAPTURE=libunwind "$bin" "$2" "$iters" ;;
    valgrind) valgrind -q "$bin" "$2" "$viters" 2>/dev/null ;;
    esac | sed -n 's/^ns_per_pair=//p'
}

columns="none traces"
[ -n "${LIBGCC_SO:-}" ] && columns="$columns libgcc"
[ $unwind = yes ] && columns="$columns libunwind"
[ $have_valgrind = yes ] && columns="$columns valgrind"

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for depth in 3 25; do
    r=1
    while [ $r -le "$rounds" ]; do
        for c in $columns; do
            run "$c" "$depth" >>"$tmp/$c.$depth"
        done
        r=$((r + 1))
    done
done

printf '%-6s %-10s %12s %10s %14s %14s\n' depth capture "ns/pair" "x no-trace" "ns/frame" "valgrind/this"
for depth in 3 25; do
    base=$(median <"$tmp/none.$depth")
    for c in $columns; do
        m=$(median <"$tmp/$c.$depth")
        v=-
        if [ $have_valgrind = yes ] && [ "$c" != valgrind ]; then
            v=$(paste "$tmp/valgrind.$depth" "$tmp/$c.$depth" | awk '$2 > 0 { print $1 / $2 }' | median)
            v=$(printf '%.2f' "$v")
        fi
        awk -v d="$depth" -v c="$c" -v m="$m" -v b="$base" -v v="$v" 'BEGIN {
            f = (c == "none" || c == "valgrind") ? "-" : sprintf("%.1f", (m - b) / 40)
            printf "%-6s %-10s %12.0f %10.2f %14s %14s\n", d, c, m, m / b, f, v }'
    done
done
