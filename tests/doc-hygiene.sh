#!/bin/sh
# doc-hygiene.sh - the design document and the library's comments describe the code as it is.
#
# doc/design.md (all of it) and the comments of lib/ and include/ must not carry what belongs to
# the history: a commit hash (7 to 40 hex digits with at least one digit and one letter), a date
# (YYYY-MM-DD), an issue number ("issue 8", "issues #64"), or a path into ../shared (a file
# outside the repository). History and measurements go to doc/experiments.md and
# bench/RESULTS.md; facts about FastMM5 are cited from doc/fastmm5-facts.md.
# Code and string literals are not searched: "0123456789abcdef" is a table, not a commit.
#
# Exit status: 0 pass, 1 fail, 99 hard error.
set -u

top_srcdir=${top_srcdir:-.}
design=$top_srcdir/doc/design.md
if ! test -f "$design" || ! test -d "$top_srcdir/lib"; then
    echo "ERROR: $design or $top_srcdir/lib not found (set top_srcdir)" >&2
    exit 99
fi

# Prints "file:line: text" for each comment line of the C files given (/* */ and //; string and
# character literals skipped).
comments() {
    awk '
    FNR == 1 { inc = 0 }
    {
        line = $0; out = ""; i = 1; n = length(line); q = ""
        while (i <= n) {
            c = substr(line, i, 1); d = substr(line, i, 2)
            if (inc) {
                if (d == "*/") { inc = 0; i += 2; continue }
                out = out c; i++; continue
            }
            if (q != "") {
                if (c == "\\") { i += 2; continue }
                if (c == q) q = ""
                i++; continue
            }
            if (d == "/*") { inc = 1; i += 2; out = out " "; continue }
            if (d == "//") { out = out " " substr(line, i + 2); break }
            if (c == "\"" || c == "'\''") q = c
            i++
        }
        if (out ~ /[^ \t*]/) print FILENAME ":" FNR ": " out
    }' "$@"
}

date='(19|20)[0-9][0-9]-[01][0-9]-[0-3][0-9]'
issue='[Ii]ssues? #?[0-9]'
shared='(\.\./)+shared|(^|[^A-Za-z0-9_./-])shared/'

tmp=`mktemp "${TMPDIR:-/tmp}/fastmm5-hygiene.XXXXXX"` || exit 99
trap 'rm -f "$tmp"' EXIT INT TERM

# design.md: every line; lib/ and include/: their comments.
awk '{ print FILENAME ":" FNR ": " $0 }' "$design" >"$tmp.all"
comments `find "$top_srcdir/lib" "$top_srcdir/include" -name '*.[ch]' | sort` >>"$tmp.all"

status=0
report() {
    what=$1
    shift
    if grep -E "$@" "$tmp.all" >"$tmp"; then
        echo "FAIL: $what:"
        cat "$tmp"
        status=1
    fi
}
# Hash: words of 7-40 hex characters with a digit and a letter.
awk '{
    rest = $0
    sub(/^[^:]*:[0-9]*: /, "", rest)
    n = split(rest, w, /[^0-9A-Za-z_]+/)
    for (k = 1; k <= n; k++)
        if (length(w[k]) >= 7 && length(w[k]) <= 40 && w[k] ~ /^[0-9a-f]+$/ && w[k] ~ /[0-9]/ && w[k] ~ /[a-f]/) {
            print; break
        }
}' "$tmp.all" >"$tmp"
if test -s "$tmp"; then
    echo "FAIL: a commit hash (history belongs in doc/experiments.md, git log):"
    cat "$tmp"
    status=1
fi
report "a date (the design and the comments are in the present tense)" "$date"
report "an issue number (say why the code is so, not which issue asked)" "$issue"
report "a path outside the repository" "$shared"
rm -f "$tmp.all"

if test $status -eq 0; then
    echo "PASS: doc/design.md and the comments of lib/ and include/ carry no hash, date, issue number or outside path"
fi
exit $status
