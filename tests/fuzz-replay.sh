#!/bin/sh
# tests/fuzz-replay.sh - the fuzz target (tests/fuzz/fuzz-heap.c) without libFuzzer, in every
# `make check`: tests/fuzz-replay runs the seed corpus (tests/fuzz/corpus/, in name order, so that
# 0-unfed-block-free gets the fresh heap it needs), then
# FM_FUZZ_REPLAY_N pseudo-random inputs (default 1000; a tenth with FASTMM_TEST_SLOW) from
# the fixed seed FM_FUZZ_REPLAY_SEED (default 20240601). A violation aborts the program with
# a message saying what broke. FM_TEST_WRAPPER (e.g. valgrind ...) runs it under a tool.
set -u
: "${top_builddir:=.}"
: "${top_srcdir:=..}"

prog=$top_builddir/tests/fuzz-replay
if [ ! -x "$prog" ]; then
    echo "fuzz-replay.sh: $prog is not built (make check builds it)" >&2
    exit 99
fi
n=${FM_FUZZ_REPLAY_N:-1000}
if [ -n "${FASTMM_TEST_SLOW:-}" ] && [ -z "${FM_FUZZ_REPLAY_N:-}" ]; then
    n=100
fi
seed=${FM_FUZZ_REPLAY_SEED:-20240601}

set -- "$top_srcdir"/tests/fuzz/corpus/*
[ -e "$1" ] || set --
echo "fuzz-replay.sh: $# corpus file(s), $n random inputs, seed $seed"
start=$(date +%s)
# shellcheck disable=SC2086 # FM_TEST_WRAPPER is a command line
${FM_TEST_WRAPPER:-} "$prog" --random "$n" "$seed" "$@"
rc=$?
echo "fuzz-replay.sh: exit $rc after $(($(date +%s) - start)) s"
if [ "$rc" -ne 0 ]; then
    echo "fuzz-replay.sh: FAIL (rerun one input with: FUZZ_HEAP_VERBOSE=1 $prog FILE)" >&2
    exit 1
fi
exit 0
