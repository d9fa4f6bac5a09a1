#!/bin/sh
# debug-preload.sh - debug mode catches a real program's bugs through LD_PRELOAD, with no change
# to the program, and names the function that allocated the block.
#
# Usage: tests/debug-preload.sh [LIBFASTMM5_SO [BUGGY_PROGRAM]]
# Defaults: $top_builddir/lib/.libs/libfastmm5.so and $top_builddir/tests/buggy-program (built
# from tests/buggy-program.c with -O0 -g -rdynamic); when that program has not been built, the
# script compiles it with ${CC:-cc} into a temporary directory.
#
# Cases (each program run is limited to 120 s):
#   overrun/abort     FASTMM5_DEBUG=1 buggy-program: the one-byte overrun of its 24-byte record is
#                     reported at free - a report naming the footer and make_customer_record (the
#                     allocating function, from the allocation stack trace) - and the process is
#                     killed by SIGABRT (exit status 134) before it prints "done".
#   overrun/continue  the same with FASTMM5_ON_ERROR=continue: the same report, then the program
#                     carries on and exits 0 after printing "done".
#   overrun/normal    without FASTMM5_DEBUG the overrun lands in the block's slack: exit 0, no
#                     report (so the report above is debug mode's doing).
#   leak/none         FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 ls /: exits 0 and reports no leak
#                     (no loss record, no LEAK SUMMARY: what ls keeps is still reachable).
#   virtual-call      FASTMM5_DEBUG=1 tests/freed-object.cpp (compiled here with g++ when there
#                     is one): a virtual call through a deleted object lands in the trap table
#                     and is reported as a virtual call on a freed object, naming make_square.
#   cxx-normal        tests/cxx-operators.cpp (compiled here with g++ too), normal mode,
#                     FASTMM5_ON_ERROR=continue: a new nothing can satisfy calls the new-handler
#                     once, then throws std::bad_alloc through libfastmm5 to the program's catch;
#                     nothrow new gives nullptr; a sized delete with the wrong size is reported
#                     (so the operators are libfastmm5's), and the program runs to the end.
#   cxx-mismatch      the same program, FASTMM5_DEBUG=1: new[] released by delete is reported as
#                     a mismatched deallocation naming both and make_array; SIGABRT.
#   leak/found        the same settings, buggy-program leak: the never-freed 24-byte record is
#                     reported ("definitely lost", "24 bytes", LEAK SUMMARY) with make_customer_record in
#                     its allocation trace; the program still exits 0 (leak reports never abort).
#
# Guards against: debug mode not switched on by FASTMM5_DEBUG, a footer check that misses a
# one-byte overrun, reports without a usable allocation trace (unwinding or dladdr symbolization
# broken in a preloaded library), FASTMM5_ON_ERROR ignored, leak reports that miss a leak or
# blame the C library's own allocations.
# Exit status: 0 pass, 1 fail, 77 skip (no shared library), 99 hard error.
set -u

top_builddir=${top_builddir:-.}
so=${1:-$top_builddir/lib/.libs/libfastmm5.so}
prog=${2:-$top_builddir/tests/buggy-program}
# absolute: the C++ sources are looked for after the cd into the scratch directory
here=`cd "\`dirname "$0"\`" && pwd`
case $so in
    /*) ;;
    *) so=`pwd`/$so ;;
esac
if ! test -e "$so"; then
    echo "SKIP: $so not built (configured with --disable-shared?)"
    exit 77
fi

work=`mktemp -d "${TMPDIR:-/tmp}/fastmm5-debug-preload.XXXXXX"` || exit 99
trap 'rm -rf "$work"' EXIT INT TERM

if test -x "$prog"; then
    case $prog in
        /*) ;;
        *) prog=`pwd`/$prog ;;
    esac
else
    src=
    for d in "${srcdir:-}/tests" "$here"; do
        if test -f "$d/buggy-program.c"; then
            src=$d/buggy-program.c
            break
        fi
    done
    if test -z "$src"; then
        echo "ERROR: $prog is not built and buggy-program.c was not found"
        exit 99
    fi
    if ! ${CC:-cc} -O0 -g -rdynamic "$src" -o "$work/buggy-program"; then
        echo "ERROR: cannot build $src with ${CC:-cc}"
        exit 99
    fi
    echo "note: $prog not built; compiled $src with ${CC:-cc} -O0 -g -rdynamic"
    prog=$work/buggy-program
fi

cd "$work" || exit 99
ulimit -c 0 2>/dev/null || true
LC_ALL=C
export LC_ALL
unset LD_PRELOAD FASTMM5_STATS FASTMM5_LOG FASTMM5_ON_ERROR FASTMM5_DEBUG FASTMM5_REPORT_LEAKS \
    FASTMM5_STACK_DEPTH 2>/dev/null || true

if command -v timeout >/dev/null 2>&1; then
    limit="timeout -k 10 120"
else
    limit=
fi

passed=0
failed=0
ok=yes

# run NAME ENV... -- CMD...: runs CMD preloaded with the given environment; NAME.out, NAME.err,
# and $rc its exit status.
run() {
    name=$1
    shift
    $limit env LD_PRELOAD="$so" "$@" > "$name.out" 2> "$name.err"
    rc=$?
    ok=yes
}

fail() {
    echo "FAIL: $name: $*"
    ok=no
}

expect_rc() {
    test "$rc" -eq "$1" || fail "exit status $rc, expected $1${2:+ ($2)}"
}

# expect_err PATTERN WHAT: standard error matches the (case-insensitive, basic) regex.
expect_err() {
    grep -i -q -e "$1" "$name.err" || fail "standard error lacks $2 ('$1')"
}

reject_err() {
    if grep -i -q -e "$1" "$name.err"; then
        fail "standard error has $2:"
        grep -i -e "$1" "$name.err" | head -n 5 | sed 's/^/  | /'
    fi
}

done_case() {
    if test $ok = yes; then
        echo "PASS: $name${1:+ ($1)}"
        passed=`expr $passed + 1`
    else
        echo "  standard error (last lines):"
        tail -n 30 "$name.err" | sed 's/^/  | /'
        failed=`expr $failed + 1`
    fi
}

# --- the one-byte overrun --------------------------------------------------------------------------

run overrun-abort FASTMM5_DEBUG=1 "$prog"
expect_rc 134 "killed by SIGABRT"
expect_err 'footer' "a footer-corruption report"
expect_err 'make_customer_record' "the allocating function in the stack trace"
if grep -q '^done$' "$name.out"; then
    fail "the program went on after the corrupt free (printed \"done\")"
fi
done_case "SIGABRT, footer corruption reported, allocated by make_customer_record"

run overrun-continue FASTMM5_DEBUG=1 FASTMM5_ON_ERROR=continue "$prog"
expect_rc 0 "FASTMM5_ON_ERROR=continue"
grep -q '^done$' "$name.out" || fail "the program did not run to the end (no \"done\")"
expect_err 'footer' "a footer-corruption report"
expect_err 'make_customer_record' "the allocating function in the stack trace"
done_case "exit 0, report still printed"

run overrun-normal "$prog"
expect_rc 0 "normal mode"
grep -q '^done$' "$name.out" || fail "the program did not run to the end (no \"done\")"
reject_err 'footer\|libfastmm5:' "a report without debug mode"
done_case "no report without FASTMM5_DEBUG"

# --- leaks ------------------------------------------------------------------------------------------

if command -v ls >/dev/null 2>&1; then
    run leak-none FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 ls /
    expect_rc 0 "ls /"
    test -s "$name.out" || fail "ls / printed nothing"
    reject_err 'definitely lost in loss record' "a leak report"
    reject_err 'LEAK SUMMARY' "a leak report"
    done_case "ls / reports no leak"
fi

run leak-found FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 "$prog" leak
expect_rc 0 "leak reports never abort"
grep -q '^done$' "$name.out" || fail "the program did not run to the end (no \"done\")"
expect_err 'LEAK SUMMARY' "the leak summary"
expect_err 'definitely lost' "the record's kind"
expect_err '24 bytes' "the leaked record's size"
expect_err 'make_customer_record' "the allocating function in the leak's stack trace"
done_case "the leaked record is reported with make_customer_record"

# --- a virtual call through a dangling C++ object -------------------------------------------------

cxx_src=
for d in "$here"; do
    if test -f "$d/freed-object.cpp"; then
        cxx_src=$d/freed-object.cpp
        break
    fi
done
if test -n "$cxx_src" && command -v "${CXX:-g++}" >/dev/null 2>&1 &&
    "${CXX:-g++}" -O0 -g -rdynamic "$cxx_src" -o "$work/freed-object" 2>"$work/cxx.err"; then
    run virtual-call FASTMM5_DEBUG=1 "$work/freed-object"
    expect_rc 134 "killed by SIGABRT"
    expect_err 'virtual method was called on a freed object' "the freed-object report"
    expect_err 'make_square' "the allocating function in the block's stack trace"
    if grep -q '^done$' "$name.out"; then
        fail "the call went through (printed \"done\")"
    fi
    done_case "a virtual call on a deleted object is reported"
else
    echo "SKIP: virtual-call (no C++ compiler)"
fi

# --- C++ operator new and delete ---------------------------------------------------------------

cxx_src=
for d in "$here"; do
    if test -f "$d/cxx-operators.cpp"; then
        cxx_src=$d/cxx-operators.cpp
        break
    fi
done
if test -n "$cxx_src" && command -v "${CXX:-g++}" >/dev/null 2>&1 &&
    "${CXX:-g++}" -O0 -g -rdynamic "$cxx_src" -o "$work/cxx-operators" 2>"$work/cxx.err"; then
    run cxx-normal FASTMM5_ON_ERROR=continue "$work/cxx-operators" throw
    expect_rc 0 "bad_alloc caught, the sized delete reported and refused nothing"
    grep -q '^caught bad_alloc after 1 handler call(s)$' "$name.out" ||
        fail "no std::bad_alloc after one new-handler call: `cat "$name.out"`"
    grep -q '^nothrow new: nullptr$' "$name.out" || fail "nothrow new did not return nullptr"
    grep -q '^done$' "$name.out" || fail "the program did not run to the end (no \"done\")"
    expect_err 'a sized operator delete was given a size that does not fit the block' "the sized-delete report"
    expect_err 'operator delete(void\*, size 100)' "the delete called"
    done_case "libfastmm5's operators: new-handler, std::bad_alloc, nothrow, sized delete checked"

    run cxx-mismatch FASTMM5_DEBUG=1 "$work/cxx-operators" mismatch
    expect_rc 134 "killed by SIGABRT"
    expect_err 'released by a function that does not match the one that allocated it' "the mismatch report"
    expect_err 'Allocated by: operator new\[\]; released by: operator delete(void\*' "both sides"
    expect_err 'make_array' "the allocating function in the block's stack trace"
    done_case "new[] released by delete is reported in debug mode"
else
    echo "SKIP: cxx-normal, cxx-mismatch (no C++ compiler)"
fi

echo "debug-preload: $passed passed, $failed failed"
test $failed -eq 0 || exit 1
exit 0
