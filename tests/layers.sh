#!/bin/sh
# layers.sh - the library's files call only downward, and no knot of cross-file calls forms.
#
# The layer table below is the one place the layers are written down. A file may use (call, or
# read a variable of) a file of its own layer or of a lower one; a lower layer needs something
# from a higher one only through the hook table (lib/hooks.h), which the start-up code fills.
# The managers are ordered among themselves (large < medium < small < tcache): a manager may use
# those below it. Within one layer, files may use each other, but no cycle of uses may take in
# more than 3 files (a knot that large has no order left in it).
#
# It reads `nm` of the built objects (lib/.libs/*.o, or lib/*.o where libtool built no PIC
# objects): a symbol one object leaves undefined (U) and another defines is a use of the second.
# A lib/*.c missing from the table fails, so a new file is given a layer when it is added.
# The hook table itself (fm_hooks, defined by init.c) is the one thing every layer may name.
#
# Exit status: 0 pass, 1 fail, 77 skip (no objects built), 99 hard error.
set -u

top_builddir=${top_builddir:-.}
NM=${NM_PROG:-nm}

# file layer (lowest first). Layer numbers: 0 platform, 1 configuration, block geometry and the
# mode flags, 2.x the managers, 3 block dispatch, 4 debug mode and reports, 5 start-up, 6 public
# entry points with the policies they own (realloc, delete checks) and introspection, 7 process
# hooks and the libc names.
table='
os_linux      0     system calls, time, thread ids, environment
kernels       0     fill/check byte kernels and their selection
pagemap       0     which address range belongs to which manager
track         0     memcheck client requests
unwind        0     stack unwinding
report        0     the plain report writer (text into a given buffer)
sizeclass     1     small and medium size classes
options       1     FASTMM5_* options parsed
modes         1     the mode flags the fast paths test, the start time
large         2.0   large blocks (own mappings)
medium        2.1   medium blocks (spans from large-block-sized mappings)
small         2.2   small blocks (spans carved from medium blocks)
tcache        2.3   per-thread caches in front of small and medium
dispatch      3     classify a pointer, allocate and free by kind, usable size
damaged       3     a plain block whose flag word was overwritten, from the span records
debug         4     debug mode
eventlog      4     events: reports of damage and misuse
stacktrace    4     stack traces for reports
tracetab      4     each distinct stack trace stored once (debug blocks keep ids)
symbolize     4     addresses to names
leaks         4     leak reports
leakscan      4     leak scan
leaksupp      4     leak suppressions
guard         4.5   guarded blocks: placed against no-access pages, checked and freed, reported
guardslot     4     regions of guarded slots, reused through the address quarantine
guardfault    4.5   the SIGSEGV/SIGBUS handler that reports a fault in a guard page
quarantine    4     freed debug blocks held back before reuse
startup       5     the lazy one-time initialization of everything below
api           6     fastmm_* entry points
realloc       6     realloc policy (frees the old block as free() does)
delete_check  6     C++ delete checks (free the block as free() does)
walk          6     heap walker and state/JSON writers
usage         6     usage report
tuning        6     memory limit, strategy, alignment, trimming
operators     6     C++ operators
verbose       6     the FASTMM5_VERBOSE listing (reads debug, tuning and kernel state)
init          7     constructor, atexit, atfork
override      7     the libc names (malloc, free, ...)
dlclose       7     dlclose, which tells the stack-trace capture of unloads
'

# No exception to the order: the list stays for an edge that must be allowed for a reason
# written beside it. Exceptions are left out of the cycle check too.
exceptions='
'

objdir=$top_builddir/lib/.libs
ls "$objdir"/*.o >/dev/null 2>&1 || objdir=$top_builddir/lib
if ! ls "$objdir"/*.o >/dev/null 2>&1; then
    echo "SKIP: no objects in $top_builddir/lib/.libs or $top_builddir/lib (not built?)"
    exit 77
fi
if ! command -v "$NM" >/dev/null 2>&1; then
    echo "ERROR: $NM not found (install binutils)" >&2
    exit 99
fi

# One line per symbol: "file D name" (defined) or "file U name" (used).
syms=`for o in "$objdir"/*.o; do
    f=${o##*/}; f=${f%.o}; f=${f#*_la-}
    "$NM" "$o" | awk -v f="$f" '
        NF == 3 && $2 ~ /^[TDBRVWCGSi]$/ { print f, "D", $3 }
        NF == 2 && $1 == "U" { print f, "U", $2 }'
done` || exit 99

printf '%s\n---\n%s\n---\n%s\n' "$table" "$exceptions" "$syms" | awk '
    BEGIN { part = 0; bad = 0 }
    $0 == "---" { part++; next }
    part == 0 && NF >= 2 { layer[$1] = $2 + 0; next }
    part == 1 && NF == 2 { allowed[$1 " " $2] = 1; next }
    part == 2 && $2 == "D" { def[$3] = $1; files[$1] = 1; next }
    part == 2 && $2 == "U" && $3 == "fm_hooks" { files[$1] = 1; next }
    part == 2 && $2 == "U" { nuse++; ufile[nuse] = $1; uname[nuse] = $3; files[$1] = 1; next }
    END {
        for (f in files)
            if (!(f in layer)) { print "FAIL: " f ".o is not in the layer table of tests/layers.sh"; bad = 1 }
        for (i = 1; i <= nuse; i++) {
            from = ufile[i]; name = uname[i]
            if (!(name in def) || def[name] == from) continue
            to = def[name]
            if (!((from " " to) in edge)) { edge[from " " to] = name; nedge[from]++; succ[from, nedge[from]] = to }
            else if (index(" " edge[from " " to] " ", " " name " ") == 0) edge[from " " to] = edge[from " " to] " " name
        }
        for (e in edge) {
            split(e, ft, " ")
            if (!(ft[1] in layer) || !(ft[2] in layer)) continue
            if (layer[ft[2]] > layer[ft[1]] && !(e in allowed)) {
                printf "FAIL: upward call: %s (layer %s) -> %s (layer %s): %s\n", ft[1], layer[ft[1]], ft[2], layer[ft[2]], edge[e]
                bad = 1
            } else if (layer[ft[2]] > layer[ft[1]]) {
                printf "note: temporary exception: %s -> %s: %s\n", ft[1], ft[2], edge[e]
            }
        }
        # Strongly connected components (a file reaches another and back): Warshall closure over
        # the few files there are.
        n = 0
        for (f in files) { n++; idx[f] = n; name_of[n] = f }
        for (e in edge) { if (e in allowed) continue; split(e, ft, " "); reach[idx[ft[1]], idx[ft[2]]] = 1 }
        for (k = 1; k <= n; k++)
            for (i = 1; i <= n; i++)
                if ((i, k) in reach)
                    for (j = 1; j <= n; j++)
                        if ((k, j) in reach) reach[i, j] = 1
        for (i = 1; i <= n; i++) {
            if (i in done) continue
            members = name_of[i]; size = 1; done[i] = 1
            split("", insc); insc[name_of[i]] = 1
            for (j = 1; j <= n; j++)
                if (j != i && ((i, j) in reach) && ((j, i) in reach)) {
                    members = members " " name_of[j]; size++; done[j] = 1; insc[name_of[j]] = 1
                }
            if (size > 3) {
                print "FAIL: a cycle of cross-file calls through " size " files: " members
                for (e in edge) {
                    split(e, ft, " ")
                    if ((ft[1] in insc) && (ft[2] in insc) && !(e in allowed)) print "    " ft[1] " -> " ft[2] ": " edge[e]
                }
                bad = 1
            }
        }
        if (!bad) print "PASS: " n " files, every cross-file call downward or within its layer, no cycle over 3 files"
        exit bad
    }'
