#!/bin/sh
# soak-short.sh - the CI version of the soak test (bench/soak.c; bench/soak.sh is the long one).
#
# Usage: tests/soak-short.sh [SOAK_PROGRAM]
# Default program: $top_builddir/bench/soak (built by make check, linked with libfastmm5).
#
# Runs:
#   soak        bench/soak --seconds $FM_SOAK_SECONDS (default 20) --threads 4: workers
#               created and destroyed all along, cross-thread frees and reallocs, aligned and
#               calloc blocks in all three block managers, every block's pattern checked; must
#               exit 0: no content error, peak OS memory within the bound, OS memory back within
#               8 MiB of the start after malloc_trim(0).
#   flip-test   3 s with one byte of a live block flipped: must exit 1 with content errors (the
#               content check can fail).
#   leak-test   3 s forgetting freed blocks: must exit 1 with the after-the-run memory check
#               failing (the memory checks can fail).
#
# Guards against: heap corruption or lost data under thread turnover and cross-thread frees
# (pending-free lists, thread-cache flush at exit, arenas of dead threads), OS memory that grows
# with time under a bounded live set, memory not given back after the run, and a soak program
# whose checks could never fail.
# Exit status: 0 pass, 1 fail, 99 hard error (program missing).
set -u

top_builddir=${top_builddir:-.}
prog=${1:-$top_builddir/bench/soak}
seconds=${FM_SOAK_SECONDS:-20}
case $seconds in
    '' | *[!0-9]*)
        echo "ERROR: FM_SOAK_SECONDS must be a whole number of seconds, not '$seconds'"
        exit 99
        ;;
esac
if ! test -x "$prog"; then
    echo "ERROR: $prog is not built (make check builds bench/soak)"
    exit 99
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fastmm5-soak.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT INT TERM

# A hard time limit on every run, in case of a hang (timeout from coreutils, when there is one).
limited() { # seconds command...
    t=$1
    shift
    if command -v timeout >/dev/null 2>&1; then
        timeout "$t" "$@"
    else
        "$@"
    fi
}

status=0

echo "== soak: $seconds s"
limited "$((seconds * 3 + 120))" "$prog" --seconds "$seconds" --threads 4 --report-every 5 >"$work/soak.out" 2>&1
rc=$?
cat "$work/soak.out"
if test $rc -ne 0 || ! grep -q '^soak: PASS ' "$work/soak.out"; then
    echo "FAIL: soak exited $rc"
    status=1
fi

echo "== flip-test (must fail with a content error)"
limited 120 "$prog" --seconds 3 --report-every 0 --flip-test >"$work/flip.out" 2>&1
rc=$?
cat "$work/flip.out"
# The damaged block stays live, so every thread that checks it before it is freed reports it
# again: one error or more, but each one a content error of the flipped block, and no other.
flipped=$(sed -n 's/^soak: flip-test: flipped byte [0-9]* of block \(0x[0-9a-f]*\) .*/\1/p' "$work/flip.out")
errors=$(grep -c 'ERROR: ' "$work/flip.out")
ours=0
if test -n "$flipped"; then
    ours=$(grep 'ERROR: ' "$work/flip.out" | grep -c "content: .*block $flipped ")
fi
if test $rc -ne 1 || test -z "$flipped" || test "$errors" -lt 1 || test "$ours" -ne "$errors"; then
    echo "FAIL: the flipped byte was not reported as content errors of its block alone (exit $rc, block ${flipped:-none}, $errors error(s), $ours of that block)"
    status=1
fi

echo "== leak-test (must fail the memory checks)"
limited 120 "$prog" --seconds 3 --report-every 0 --leak-test >"$work/leak.out" 2>&1
rc=$?
cat "$work/leak.out"
if test $rc -ne 1 || ! grep -q 'FAIL: OS memory .* after the run' "$work/leak.out"; then
    echo "FAIL: the leaked blocks did not fail the after-the-run memory check (exit $rc)"
    status=1
fi

exit $status
