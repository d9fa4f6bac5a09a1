#!/bin/sh
# leak-exit.sh - the leak check at exit, on a real program under LD_PRELOAD (tests/leak-program).
#
#   clean      FASTMM5_REPORT_LEAKS=1 FASTMM5_LEAK_EXIT_CODE=23, a program that frees everything:
#              exit 0, nothing on standard error, in normal and debug mode.
#   threads    the same settings, a program that loses a 777-byte block and returns from main
#              while five threads still run (four allocating, one blocked in read): exit 23, one
#              definitely-lost record and a LEAK SUMMARY, no hang (a 60 s timeout); in debug
#              mode the record says "777 bytes" and names lose_block.
#   no-code    the same without FASTMM5_LEAK_EXIT_CODE: exit 0, the report still printed.
#   suppressed debug mode, FASTMM5_SUPPRESSIONS naming fun:lose_block: exit 0, no loss record.
#   all        FASTMM5_REPORT_LEAKS=all: the 555-byte block kept in a global is reported as
#              still reachable.
#   log        FASTMM5_REPORT_LEAKS=1 FASTMM5_LOG=file: the log gets the still-reachable record
#              too, standard error only the lost one.
#
# Guards against: a scan that deadlocks or crashes on running threads, blocks reachable from
# globals or other threads reported as lost, a lost block missed, the exit status not set, the
# suppression file ignored, the still-reachable records missing from =all.
# Exit status: 0 pass, 1 fail, 77 skip (no shared library), 99 hard error.
set -u

top_builddir=${top_builddir:-.}
so=${1:-$top_builddir/lib/.libs/libfastmm5.so}
prog=${2:-$top_builddir/tests/leak-program}
case $so in
    /*) ;;
    *) so=`pwd`/$so ;;
esac
case $prog in
    /*) ;;
    *) prog=`pwd`/$prog ;;
esac
if ! test -e "$so"; then
    echo "SKIP: $so not built (configured with --disable-shared?)"
    exit 77
fi
test -x "$prog" || { echo "ERROR: $prog is not built"; exit 99; }

work=`mktemp -d "${TMPDIR:-/tmp}/fastmm5-leak-exit.XXXXXX"` || exit 99
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work" || exit 99
unset FASTMM5_STATS FASTMM5_LOG FASTMM5_ON_ERROR FASTMM5_DEBUG FASTMM5_REPORT_LEAKS FASTMM5_LEAK_EXIT_CODE \
    FASTMM5_SUPPRESSIONS FASTMM5_VERBOSE
failures=0
name=
rc=

fail() {
    echo "FAIL: $name: $*"
    sed 's/^/    stderr: /' "$name.err" | head -40
    failures=$((failures + 1))
}

# run NAME MODE [VAR=value...]
run() {
    name=$1
    mode=$2
    shift 2
    before=$failures
    # LD_PRELOAD reaches the program alone: timeout and env are the machine's own programs, which
    # the i386 build's library does not fit ("wrong ELF class").
    timeout 60 env "$@" LD_PRELOAD="$so" "$prog" "$mode" >"$name.out" 2>"$name.err" </dev/null
    rc=$?
}

done_case() {
    if test $failures -eq $before; then
        echo "PASS: $name"
    fi
}

for debug in 0 1; do
    run clean-$debug clean FASTMM5_DEBUG=$debug FASTMM5_REPORT_LEAKS=1 FASTMM5_LEAK_EXIT_CODE=23
    test $rc -eq 0 || fail "exit status $rc, expected 0"
    grep -q '^done$' "$name.out" || fail "no \"done\""
    test -s "$name.err" && fail "something on standard error"
    done_case

    run threads-$debug threads FASTMM5_DEBUG=$debug FASTMM5_REPORT_LEAKS=1 FASTMM5_LEAK_EXIT_CODE=23
    test $rc -eq 23 || fail "exit status $rc, expected 23 (124: it hung)"
    grep -q '^done$' "$name.out" || fail "no \"done\" (standard output not flushed?)"
    n=`grep -c 'definitely lost in loss record' "$name.err"`
    test "$n" -eq 1 || fail "$n definitely-lost records, expected 1"
    grep -q 'possibly lost in loss\|indirectly lost in loss' "$name.err" && fail "a block reported possibly or indirectly lost"
    grep -q 'LEAK SUMMARY' "$name.err" || fail "no LEAK SUMMARY"
    if test $debug = 1; then
        grep -q '^libfastmm5: 777 bytes in 1 block is definitely lost' "$name.err" || fail "not \"777 bytes in 1 block\""
        grep -q 'lose_block' "$name.err" || fail "lose_block not in the allocation stack"
    fi
    done_case
done

run no-code threads FASTMM5_REPORT_LEAKS=1
test $rc -eq 0 || fail "exit status $rc without FASTMM5_LEAK_EXIT_CODE"
grep -q 'definitely lost in loss record' "$name.err" || fail "no report"
done_case

echo '# lose_block leaks on purpose' >supp
echo 'fun:lose_*' >>supp
run suppressed threads FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 FASTMM5_LEAK_EXIT_CODE=23 FASTMM5_SUPPRESSIONS=supp
test $rc -eq 0 || fail "exit status $rc, expected 0 (the only leak is suppressed)"
grep -q 'in loss record' "$name.err" && fail "a loss record despite the suppression"
done_case

run all threads FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=all
grep -q '^libfastmm5: 555 bytes in 1 block is still reachable' "$name.err" || fail "the global's block is not still reachable"
done_case

run log threads FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 FASTMM5_LOG=leaks.log
grep -q 'still reachable in loss record' "$name.err" && fail "a still-reachable record on standard error without =all"
grep -q '^libfastmm5: 555 bytes in 1 block is still reachable' leaks.log || fail "the log lacks the still-reachable record"
grep -q '^libfastmm5: 777 bytes in 1 block is definitely lost' leaks.log || fail "the log lacks the lost block"
done_case

test $failures -eq 0 || exit 1
exit 0
