#!/bin/sh
# tests/stats-tool.sh - tools/fastmm5-stats on this build's library (FASTMM5_LIB), and the
# FASTMM5_* tuning variables it carries through to the program.
#
# Guards: the tool runs a program preloaded, passes its output and exit status through, and
# prints the state table at exit; --json gives the library's JSON object, in which
# FASTMM5_MEMORY_LIMIT (with a suffix), FASTMM5_MIN_ALIGNMENT and FASTMM5_STRATEGY show as in
# force; FASTMM5_VERBOSE=1 prints the new settings. Skips (77) without python3.
: "${top_builddir:=.}"
tool="$top_builddir/tools/fastmm5-stats"
FASTMM5_LIB="$top_builddir/lib/.libs/libfastmm5.so"
export FASTMM5_LIB
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found"; exit 77; }
test -x "$tool" || { echo "ERROR: $tool not built"; exit 99; }
test -f "$FASTMM5_LIB" || { echo "ERROR: $FASTMM5_LIB not built"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. the table, with the program's own output and status passed through
# (python3 as the program: dash's `exit` leaves with _exit, skipping the exit-time report)
python3 "$tool" python3 -c 'import sys; print("program-output"); sys.stderr.write("program-error\n"); sys.exit(3)' \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
test $rc -eq 3 || fail "exit status $rc, expected 3"
grep -q '^program-output$' "$tmp/out" || fail "program output lost"
grep -q '^program-error$' "$tmp/err" || fail "program standard error lost"
grep -q 'heap state at exit' "$tmp/out" || fail "no table: $(cat "$tmp/out" "$tmp/err")"
grep -q 'Blocks in use' "$tmp/out" || fail "no block table"
grep -Eq '^ +medium +[0-9]' "$tmp/out" || fail "no medium row"
grep -q '"library"' "$tmp/err" && fail "JSON leaked to standard error"
grep -q 'FASTMM5_LIB' "$tmp/err" && fail "the library saw FASTMM5_LIB: $(cat "$tmp/err")"

# 2. --json and the tuning variables
FASTMM5_MEMORY_LIMIT=1G FASTMM5_MIN_ALIGNMENT=64 FASTMM5_STRATEGY=low-memory \
  python3 "$tool" --json ls / >"$tmp/json" 2>"$tmp/err" || fail "--json run failed: $(cat "$tmp/err")"
python3 - "$tmp/json" <<'PY' || fail "JSON options: $(cat "$tmp/json")"
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text[text.index("{"):])
o = d["options"]
assert o["memory_limit_bytes"] == 1 << 30, o
assert o["min_alignment"] == 64, o
assert o["strategy"] == "low-memory" and o["medium_span_bytes"] == 3 << 19, o
assert len(d["state"]["small_classes"]) in (51, 61)
PY

# 3. FASTMM5_VERBOSE=1 describes the new settings
FASTMM5_VERBOSE=1 FASTMM5_MEMORY_LIMIT=512M FASTMM5_MIN_ALIGNMENT=32 LD_PRELOAD="$FASTMM5_LIB" \
  sh -c true 2>"$tmp/verbose"
grep -q 'memory limit 536870912 bytes, minimum alignment 32' "$tmp/verbose" || fail "verbose line: $(cat "$tmp/verbose")"
FASTMM5_MEMORY_LIMIT=12X LD_PRELOAD="$FASTMM5_LIB" sh -c true 2>"$tmp/warn"
grep -q 'FASTMM5_MEMORY_LIMIT=12X' "$tmp/warn" || fail "no warning for a bad limit"
echo "PASS"
exit 0
