#!/bin/sh
# tests/fastmm5-run.sh - the tools/fastmm5-run wrapper, run on this build's library (--library).
#
# Guards: each option sets its FASTMM5_* variable, libfastmm5 goes to the front of LD_PRELOAD
# (an existing LD_PRELOAD is kept after it), the program really runs on libfastmm5 (--stats gives
# the usage report with allocations served > 0; --log fills the file), the program's output and
# exit status pass through, and usage errors exit 125, a missing program 127. Also that `make`
# substituted the library path: the generated script names $libdir/libfastmm5.so.N, no @...@.
# Exit status: 0 pass, 1 fail, 99 hard error.
: "${top_builddir:=.}"
run="$top_builddir/tools/fastmm5-run"
lib="$top_builddir/lib/.libs/libfastmm5.so"
test -x "$run" || { echo "ERROR: $run not built"; exit 99; }
test -f "$lib" || { echo "ERROR: $lib not built"; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fastmm5-run.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

# 1. the generated script: no placeholder left, the library path is absolute and versioned
grep -q '@[A-Za-z_]*@' "$run" && fail "placeholder left in $run: $(grep '@[A-Za-z_]*@' "$run")"
grep -Eq "^fastmm5_library='/.*/libfastmm5\.so\.[0-9]+'\$" "$run" || fail "library path not substituted"
"$run" --version | grep -q '^fastmm5-run (libfastmm5) [0-9]' || fail "--version"
"$run" --help | grep -q -- '--debug' || fail "--help"

# 2. every option sets its variable, LD_PRELOAD keeps what was there after libfastmm5
unset FASTMM5_DEBUG FASTMM5_REPORT_LEAKS FASTMM5_STATS FASTMM5_LOG FASTMM5_ON_ERROR FASTMM5_VERBOSE
LD_PRELOAD=libdl.so.2 "$run" --library "$lib" --debug --leaks --stats --continue --verbose \
    --log "$tmp/events.log" -- env >"$tmp/env" 2>"$tmp/err" || fail "env failed: $(cat "$tmp/err")"
for v in FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 FASTMM5_STATS=1 FASTMM5_ON_ERROR=continue \
         FASTMM5_VERBOSE=1 "FASTMM5_LOG=$tmp/events.log" "LD_PRELOAD=$lib libdl.so.2"; do
    grep -qxF "$v" "$tmp/env" || fail "$v not in the environment: $(grep -E 'FASTMM5|PRELOAD' "$tmp/env")"
done

# 3. the program runs on libfastmm5: usage report with allocations served, output and status
# (not sh -c 'exit N': dash leaves with _exit, so no destructor writes a report)
"$run" --library="$lib" --stats ls -d / "$tmp/no-such-file" >"$tmp/out" 2>"$tmp/err"
rc=$?
test $rc -eq 2 || fail "exit status $rc, expected ls's 2: $(cat "$tmp/err")"
grep -qx / "$tmp/out" || fail "program output lost"
grep -q 'libfastmm5 usage report' "$tmp/err" || fail "no usage report: $(cat "$tmp/err")"
served=$(sed -n 's/.*allocations served: *\([0-9][0-9]*\).*/\1/p' "$tmp/err" | head -n 1)
test "${served:-0}" -gt 0 || fail "allocations served: '${served}' in $(cat "$tmp/err")"

# 4. --log: an error report (a double free, continued) lands in the file
if command -v python3 >/dev/null 2>&1; then
    "$run" --library "$lib" --continue --log "$tmp/err.log" python3 -c '
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
p = libc.malloc(64)
libc.free(ctypes.c_void_p(p)); libc.free(ctypes.c_void_p(p))' >/dev/null 2>&1
    grep -qi 'free' "$tmp/err.log" || fail "no event report in the --log file: $(cat "$tmp/err.log" 2>&1)"
fi

# 5. usage errors and a missing program
"$run" >/dev/null 2>&1; test $? -eq 125 || fail "no program: expected 125"
"$run" --bogus true >/dev/null 2>&1; test $? -eq 125 || fail "unknown option: expected 125"
"$run" --library "$tmp/none.so" true >/dev/null 2>&1; test $? -eq 125 || fail "missing library: expected 125"
"$run" --library "$lib" "$tmp/no-such-program" >/dev/null 2>&1; test $? -eq 127 || fail "missing program: expected 127"
echo "PASS: fastmm5-run"
exit 0
