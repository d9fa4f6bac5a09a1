#!/bin/sh
# tests/option-names.sh - fastmm5(7) and `fastmm5-run --help` name exactly the FASTMM5_* variables
# of the library's options table (lib/options.c), no more, no fewer.
#
# The table's names come from the library itself: its FASTMM5_VERBOSE=1 listing, printed by
# tests/planted-bugs (linked with libfastmm5; FM_TEST_WRAPPER runs it under an emulator). The
# man page's names are the items of its ENVIRONMENT section; the help's, every FASTMM5_ name in it.
# FM_OPTION_NAMES_DOC / FM_OPTION_NAMES_RUN replace the two documents (to check that this test
# fails on a document that lacks a name).
# Exit status: 0 pass, 1 fail, 99 hard error.
: "${top_builddir:=.}" "${top_srcdir:=.}"
prog="$top_builddir/tests/planted-bugs"
man=${FM_OPTION_NAMES_DOC:-$top_srcdir/doc/man/fastmm5.7}
run=${FM_OPTION_NAMES_RUN:-$top_builddir/tools/fastmm5-run}
test -x "$prog" || { echo "ERROR: $prog not built"; exit 99; }
test -f "$man" || { echo "ERROR: $man not found"; exit 99; }
test -f "$run" || { echo "ERROR: $run not built"; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/option-names.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

FASTMM5_VERBOSE=1 ${FM_TEST_WRAPPER:-} "$prog" clean 2>&1 >/dev/null |
    sed -n 's/^libfastmm5:   \(FASTMM5_[A-Z0-9_]*\)[ =].*/\1/p' | sort >"$tmp/table"
count=$(wc -l <"$tmp/table")
if [ "$count" -lt 10 ] || [ -n "$(uniq -d "$tmp/table")" ]; then
    echo "ERROR: the library's FASTMM5_VERBOSE listing gave $count names (or repeated ones):"
    cat "$tmp/table"
    exit 99
fi

# fastmm5(7): each ".TP" item of ENVIRONMENT that starts with a FASTMM5_ name.
awk '/^\.SH / { env = ($2 == "ENVIRONMENT") }
     env && tp && /^\.B[IR]* +FASTMM5_[A-Z]/ { match($0, /FASTMM5_[A-Z0-9_]+/); print substr($0, RSTART, RLENGTH) }
     { tp = ($0 == ".TP") }' "$man" | sort >"$tmp/man"
sh "$run" --help | grep -o 'FASTMM5_[A-Z][A-Z0-9_]*' | sort -u >"$tmp/run"

status=0
for doc in man run; do
    if ! diff -u "$tmp/table" "$tmp/$doc" >"$tmp/diff"; then
        case $doc in
            man) echo "FAIL: the ENVIRONMENT items of $man differ from the options table (- missing, + extra):" ;;
            run) echo "FAIL: '$run --help' differs from the options table (- missing, + extra):" ;;
        esac
        sed -n '/^[-+]FASTMM5_/p' "$tmp/diff"
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "PASS: $count names, the same in the library, fastmm5(7) and fastmm5-run --help"
exit $status
