#!/bin/sh
# bench/fuzz-long.sh - the long fuzz run of libfastmm5, for a bench run; `make fuzz-long`
# in a configured build directory runs it (FUZZ_ARGS='--seconds N ...' passes options).
#
#   bench/fuzz-long.sh [--seconds N] [--sanitize LIST] [-- LIBFUZZER-FLAGS...]
#
# It is tests/fuzz-libfuzzer.sh (same build, same target, same checks) with a longer time (default
# 600 s, or FM_FUZZ_SECONDS), value profiling on, and its own directory bench/out/fuzz/ in the
# build directory, whose corpus grows from run to run. It prints executions, coverage and the
# duration; exit status as tests/fuzz-libfuzzer.sh (77: no clang with libFuzzer).
set -u
me=fuzz-long.sh
if [ -z "${FM_FUZZ_SOURCES:-}" ] || [ -z "${top_builddir:-}" ] || [ -z "${top_srcdir:-}" ]; then
    echo "$me: run it as 'make fuzz-long' in a configured build directory (it passes the core's sources)" >&2
    exit 2
fi
seconds=${FM_FUZZ_SECONDS:-600}
extra=
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --sanitize) FM_FUZZ_SANITIZE=${2:?--sanitize needs a value}; export FM_FUZZ_SANITIZE; shift 2 ;;
    --) shift; extra="$*"; break ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "$me: unknown option '$1' (--help)" >&2; exit 2 ;;
    esac
done

FM_FUZZ_SECONDS=$seconds
FM_FUZZ_WORKDIR=${FM_FUZZ_WORKDIR:-$top_builddir/bench/out/fuzz}
FM_FUZZ_ARGS="-use_value_profile=1 ${FM_FUZZ_ARGS:-} $extra"
export FM_FUZZ_SECONDS FM_FUZZ_WORKDIR FM_FUZZ_ARGS

start=$(date +%s)
echo "$me: $seconds s of fuzzing in $FM_FUZZ_WORKDIR (started $(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
sh "$top_srcdir/tests/fuzz-libfuzzer.sh"
rc=$?
echo "$me: exit $rc, $(($(date +%s) - start)) s in all (build included)"
exit $rc
