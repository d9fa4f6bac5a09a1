#!/bin/sh
# debug-growth.sh - FastMM5's debug-mode growth scenario (doc/fastmm5-facts.md 4.9) at full
# size, for every combination of FastMM5's two debug options: 8 threads x 30,000 iterations of
# malloc(random 1..70,000) + fill + free, then the OS memory libfastmm5 still holds, against the
# same run in normal mode. FastMM5 held 1,065-1,195 MB here with its default options (vs 15.7 MB
# in normal mode); the bar for libfastmm5 is within 4x of normal mode for every combination.
#
# Usage: bench/debug-growth.sh [LIBFASTMM5_SO [DEBUGGROWTH_BINARY]]
# (defaults: lib/.libs/libfastmm5.so and bench/out/bin/debuggrowth, built by bench/run.sh);
# STACK_DEPTH: the traces' depth in every run (default 0: no traces, as the seed issue measured).
set -eu
so=${1:-lib/.libs/libfastmm5.so}
bin=${2:-bench/out/bin/debuggrowth}
threads=8 iters=30000 maxsize=70000 depth=${STACK_DEPTH:-0}

held() { # env settings...: prints the OS memory held after the run, in bytes
    env LD_PRELOAD="$so" FASTMM5_STACK_DEPTH="$depth" "$@" "$bin" $threads $iters $maxsize 2>/dev/null |
        sed -n 's/.*os_memory_bytes=\([0-9]*\).*/\1/p'
}

normal=$(held FASTMM5_DEBUG=0)
printf '%-45s %12s %8s\n' "mode" "OS memory" "x normal"
printf '%-45s %12s %8s\n' "normal mode" "$normal" "1.00"
status=0
for options in "never-free-small-spans,never-merge" never-merge never-free-small-spans none; do
    bytes=$(held FASTMM5_DEBUG=1 FASTMM5_DEBUG_OPTIONS=$options)
    ratio=$(awk -v a="$bytes" -v b="$normal" 'BEGIN { printf "%.2f", a / b }')
    printf '%-45s %12s %8s\n' "debug, options: $options" "$bytes" "$ratio"
    awk -v r="$ratio" 'BEGIN { exit !(r <= 4) }' || status=1
done
exit $status
