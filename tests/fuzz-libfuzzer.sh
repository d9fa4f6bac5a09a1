#!/bin/sh
# tests/fuzz-libfuzzer.sh - fuzzes libfastmm5 with libFuzzer for a bounded time (make check-long).
#
# Builds the library core (FM_FUZZ_SOURCES: lib_libfastmm5_core_la_SOURCES as this build has them,
# the asm kernels included where configure chose them; config.h from the build directory) with
# clang -fsanitize=fuzzer-no-link, the target tests/fuzz/fuzz-heap.c with -fsanitize=fuzzer, and
# runs it for FM_FUZZ_SECONDS (default 30) from the seed corpus tests/fuzz/corpus/ plus the
# corpus it grew in earlier runs. override.c is left out on purpose: libFuzzer's own allocations
# stay in glibc, so the heap's only client is the target, which therefore knows every live block
# (stale and wild pointers are only safe to hand to free() when nothing else could own them).
#
# Exit: 0 no crash, 1 a crash or a violation (crash-* files in the artifacts directory; replay one
# with tests/fuzz-replay FILE), 77 SKIP when no clang with libFuzzer is found (Debian: apt-get
# install clang libclang-rt-14-dev) or FM_FUZZ_SECONDS=0, 99 a build error.
#
# Environment: FM_FUZZ_SECONDS (30), FM_FUZZ_CC (first of clang, clang-19 .. clang-14),
# FM_FUZZ_SANITIZE (e.g. address: an extra -fsanitize= for the core and the target),
# FM_FUZZ_RSS_MB (2048), FM_FUZZ_ARGS (more libFuzzer flags), FM_FUZZ_WORKDIR
# (objects, binary, grown corpus, artifacts, log; default tests/fuzz-libfuzzer.d in the build
# directory), FM_FUZZ_JOBS (parallel compiles, 2); FUZZ_HEAP_VERBOSE=1 shows the library's
# reports of the hostile calls (they go to /dev/null otherwise).
set -u
: "${top_builddir:=.}"
: "${top_srcdir:=..}"
me=fuzz-libfuzzer.sh

seconds=${FM_FUZZ_SECONDS:-30}
case $seconds in
'' | *[!0-9]*) echo "$me: FM_FUZZ_SECONDS='$seconds' is not a number of seconds" >&2; exit 99 ;;
esac
if [ "$seconds" -eq 0 ]; then
    echo "$me: SKIP: FM_FUZZ_SECONDS=0"
    exit 77
fi
if [ -z "${FM_FUZZ_SOURCES:-}" ]; then
    echo "$me: FM_FUZZ_SOURCES is not set: run it through make check (or make fuzz-long)" >&2
    exit 99
fi
if [ ! -f "$top_builddir/config.h" ]; then
    echo "$me: no config.h in $top_builddir (a configured build directory is needed)" >&2
    exit 99
fi

cc=${FM_FUZZ_CC:-}
if [ -z "$cc" ]; then
    for c in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
        if command -v "$c" >/dev/null 2>&1; then
            cc=$c
            break
        fi
    done
fi
if [ -z "$cc" ]; then
    echo "$me: SKIP: no clang found (Debian: apt-get install clang libclang-rt-14-dev)"
    exit 77
fi

work=${FM_FUZZ_WORKDIR:-$top_builddir/tests/fuzz-libfuzzer.d}
mkdir -p "$work/obj" "$work/corpus" "$work/artifacts" || exit 99
work=$(cd "$work" && pwd)

# Is libFuzzer there? (clang alone links nothing with -fsanitize=fuzzer without libclang-rt.)
cat >"$work/probe.c" <<'EOF'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return size > 0 && data[0] == 1; }
EOF
if ! "$cc" -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" >"$work/probe.log" 2>&1; then
    cat "$work/probe.log"
    echo "$me: SKIP: $cc cannot link a libFuzzer program (Debian: apt-get install libclang-rt-14-dev)"
    exit 77
fi

san=
if [ -n "${FM_FUZZ_SANITIZE:-}" ]; then
    san="-fsanitize=$FM_FUZZ_SANITIZE"
fi
rss_mb=${FM_FUZZ_RSS_MB:-2048}
jobs=${FM_FUZZ_JOBS:-2}
fuzz_args=${FM_FUZZ_ARGS:-}
cppflags="-DHAVE_CONFIG_H -I$top_builddir -I$top_srcdir/include -I$top_srcdir/lib"
cflags="-O2 -g -fno-omit-frame-pointer ${FM_FUZZ_CFLAGS:-}"
bin=$work/fuzz-heap
stamp=$work/build-flags

# Rebuild when a source, config.h, this script or the flags changed since the last build.
flags_now="$cc $cppflags $cflags $san $FM_FUZZ_SOURCES"
rebuild=yes
if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$flags_now" ]; then
    newer=$(find "$top_srcdir/lib" "$top_srcdir/include" "$top_srcdir/asm" "$top_srcdir/tests/fuzz" \
        "$top_builddir/config.h" "$0" -newer "$bin" -type f 2>/dev/null | head -n 1)
    [ -z "$newer" ] && rebuild=no
fi

if [ "$rebuild" = yes ]; then
    echo "$me: building the core and the target with $cc ($($cc --version | head -n 1))"
    build_start=$(date +%s)
    rm -f "$bin" "$stamp" "$work"/obj/*.o
    running=0
    objs=
    : >"$work/build.log"
    for src in $FM_FUZZ_SOURCES; do
        obj=$work/obj/$(echo "$src" | tr '/.' '__').o
        objs="$objs $obj"
        # shellcheck disable=SC2086 # flag lists
        case $src in
        *.c) set -- $cppflags $cflags -fsanitize=fuzzer-no-link $san ;;
        *) set -- $cppflags -g ;;
        esac
        "$cc" "$@" -c "$top_srcdir/$src" -o "$obj" >>"$work/build.log" 2>&1 &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
            wait
            running=0
        fi
    done
    wait
    for obj in $objs; do
        if [ ! -f "$obj" ]; then
            cat "$work/build.log"
            echo "$me: compiling the core failed ($obj missing)" >&2
            exit 99
        fi
    done
    # shellcheck disable=SC2086
    if ! "$cc" $cppflags $cflags -fsanitize=fuzzer $san "$top_srcdir/tests/fuzz/fuzz-heap.c" $objs \
        ${FM_FUZZ_LIBS:-} -o "$bin" >>"$work/build.log" 2>&1; then
        cat "$work/build.log"
        echo "$me: linking the fuzzer failed" >&2
        exit 99
    fi
    echo "$flags_now" >"$stamp"
    echo "$me: built $bin in $(($(date +%s) - build_start)) s"
fi

rm -f "$work"/artifacts/crash-* "$work"/artifacts/timeout-* "$work"/artifacts/oom-* "$work"/artifacts/leak-*
log=$work/fuzz.log
echo "$me: fuzzing for $seconds s (seed corpus $top_srcdir/tests/fuzz/corpus, grown corpus $work/corpus)"
start=$(date +%s)
# shellcheck disable=SC2086 # FM_FUZZ_ARGS is a list of flags
"$bin" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -max_len=4096 -timeout=60 \
    -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    $fuzz_args "$work/corpus" "$top_srcdir/tests/fuzz/corpus" >"$log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))

# The summary: libFuzzer's last status line, its final statistics and the target's totals.
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
corp=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p')
echo "----- last lines of $log -----"
tail -n 15 "$log"
echo "------------------------------"
echo "$me: ${runs:-?} executions in $elapsed s (${rate:-?} exec/s), coverage ${cov:-?}, corpus ${corp:-?}"
grep '^fuzz-heap: [0-9]* inputs' "$log" | tail -n 1
if [ "$rc" -ne 0 ]; then
    echo "$me: FAIL: libFuzzer exited with $rc"
    grep -n -A 12 'fuzz-heap: FAILURE' "$log" | head -n 40
    for f in "$work"/artifacts/*; do
        [ -f "$f" ] || continue
        echo "$me: artifact $f (replay: $top_builddir/tests/fuzz-replay $f, or $bin $f)"
    done
    exit 1
fi
exit 0
