#!/bin/sh
# valgrind-planted.sh - memcheck understands libfastmm5's blocks.
#
# tests/planted-bugs (linked with libfastmm5) runs under memcheck with
# --soname-synonyms=somalloc=nouserintercepts, so memcheck keeps libfastmm5 as the allocator
# and only learns about blocks through libfastmm5's client requests (lib/track.h). Each planted
# error must be reported - the right kind, exactly once - and the clean run must have none.
# Then the other view: plain valgrind (which then replaces malloc itself) runs it clean too.
# Skips (77) when valgrind is not installed, cannot start the program at all (32-bit memcheck
# without libc6-dbg:i386), or the library was built without --enable-valgrind.
set -u
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/planted-bugs
command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind not installed"; exit 77; }
grep -q '^#define FASTMM_VALGRIND 1' "$top_builddir/config.h" 2>/dev/null ||
    { echo "SKIP: built without --enable-valgrind"; exit 77; }
[ -x "$prog" ] || { echo "missing $prog"; exit 99; }

vg="valgrind --soname-synonyms=somalloc=nouserintercepts --leak-check=full --errors-for-leak-kinds=definite"
fail=0
run() { # mode, pattern expected in the report ("" for none), expected error count
    mode=$1 pattern=$2 want=$3
    log=$(mktemp)
    # libtool's wrapper script must not be run under valgrind: use the real binary
    real=$prog
    [ -x "$top_builddir/tests/.libs/planted-bugs" ] && real=$top_builddir/tests/.libs/planted-bugs
    LD_LIBRARY_PATH=$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        $vg --log-file="$log" "$real" "$mode" >/dev/null 2>&1
    if grep -q "Fatal error at startup" "$log"; then
        # valgrind itself cannot run here (e.g. 32-bit memcheck without libc6-dbg:i386): the
        # environment's problem, not a finding about libfastmm5
        echo "SKIP: valgrind cannot start $real here:"; cat "$log"; rm -f "$log"; exit 77
    fi
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    if [ -n "$pattern" ] && ! grep -q "$pattern" "$log"; then
        echo "FAIL: $mode: memcheck did not report '$pattern'"; cat "$log"; fail=1
    elif [ "$errors" != "$want" ]; then
        echo "FAIL: $mode: $errors errors, expected $want"; cat "$log"; fail=1
    else
        echo "ok: $mode: $errors error(s)${pattern:+, '$pattern'}"
    fi
    rm -f "$log"
}
run clean "" 0
run invalid-write "Invalid write of size 1" 1
run read-after-free "Invalid read of size 1" 1
run read-link-after-free "Invalid read of size 1" 2
run uninitialised "Conditional jump or move depends on uninitialised value" 1
run leak "definitely lost" 1

# The other view: valgrind's own malloc replaces ours (no soname synonyms given).
real=$prog
[ -x "$top_builddir/tests/.libs/planted-bugs" ] && real=$top_builddir/tests/.libs/planted-bugs
if LD_LIBRARY_PATH=$top_builddir/lib/.libs valgrind -q --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite "$real" clean >/dev/null 2>&1; then
    echo "ok: plain valgrind runs the clean mode clean"
else
    echo "FAIL: plain valgrind reported errors in the clean mode"; fail=1
fi
exit $fail
