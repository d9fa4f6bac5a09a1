#!/bin/sh
# soak.sh - the long soak run of libfastmm5 (make soak calls it; tests/soak-short.sh is the CI one).
#
# Usage: bench/soak.sh [--build DIR] [--minutes N] [--debug] [SOAK_OPTIONS...]
#
#   --build DIR   a configured build directory of libfastmm5 (default: the current directory if it
#                 has one, else the source tree if configured in place, else a new out-of-tree
#                 build in ${TMPDIR:-/tmp}/fastmm5-soak-build); `make bench/soak` is run there, so
#                 the program and the library are rebuilt if needed
#   --minutes N   run time (default 5)
#   --debug       run in debug mode (FASTMM5_DEBUG=1; the program then applies its debug bounds)
#   anything else goes to bench/soak (--threads N, --seed N, --live-mb M, --max-os-mb M, ...;
#                 bench/soak --help lists them)
#
# Prints bench/soak's progress lines (one every 10 s unless --report-every says otherwise) and its
# summary, keeps the whole output in DIR/bench/out/soak-<date>.log, and exits with its status:
# 0 every check held, 1 a check failed. bench/README.md describes the checks and their bounds.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=
minutes=5
debug=0
while test $# -gt 0; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --build=*) build=${1#--build=}; shift ;;
        --minutes) minutes=$2; shift 2 ;;
        --minutes=*) minutes=${1#--minutes=}; shift ;;
        --debug) debug=1; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) break ;;
    esac
done
case $minutes in
    '' | *[!0-9.]* | *.*.*) echo "bench/soak.sh: --minutes wants a number, not '$minutes'" >&2; exit 2 ;;
esac

if test -z "$build"; then
    if test -f Makefile && grep -q '^nodist_bench_soak_SOURCES' Makefile; then
        build=$(pwd)
    elif test -f "$src/Makefile"; then
        build=$src
    else
        build=${TMPDIR:-/tmp}/fastmm5-soak-build
        if ! test -f "$build/Makefile"; then
            echo "bench/soak.sh: no configured build found: configuring one in $build" >&2
            if ! test -x "$src/configure"; then
                (cd "$src" && autoreconf -fi)
            fi
            mkdir -p "$build"
            (cd "$build" && "$src/configure" >configure.log)
        fi
    fi
fi
build=$(cd "$build" && pwd)
${MAKE:-make} -C "$build" -s bench/soak >&2

seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 0.5 }')
mkdir -p "$build/bench/out"
log=$build/bench/out/soak-$(date +%Y%m%d-%H%M%S).log
echo "bench/soak.sh: $minutes min, log $log" >&2
if test $debug = 1; then
    FASTMM5_DEBUG=1
    export FASTMM5_DEBUG
fi

# The exit status of bench/soak, not of tee.
set +e
{
    "$build/bench/soak" --seconds "$seconds" --report-every 10 "$@" 2>&1
    echo $? >"$log.rc"
} | tee "$log"
rc=$(cat "$log.rc")
rm -f "$log.rc"
exit "$rc"
