#!/usr/bin/env bash
# tests/tsan.sh - libfastmm5 under ThreadSanitizer: the library and tests/thread-stress built with
# -fsanitize=thread in a build directory of their own, then the stress run twice (the assembly
# kernels as configured, then the portable C kernels, FASTMM5_DISABLE_ASM=1).
#
#   tests/tsan.sh [BUILD_DIR]        default: ./build-tsan (relative to the current directory)
#
# FM_TSAN_SECONDS: seconds per run (default 15). Exit 0: no report; 66: TSan reported a
# race (the report is on standard error); 77: this compiler cannot build with TSan (skip).
#
# Under TSan the process's malloc is TSan's own (its runtime comes first), so thread-stress calls
# the fastmm_* entry points; libfastmm5 is instrumented and reached directly. The only
# suppressions (tests/tsan.supp, each with its reason) cover the debug scanner's and the
# walker's deliberate reads of blocks their owners are rewriting.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-tsan}
seconds=${FM_TSAN_SECONDS:-15}
cc=${CC:-gcc}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int main(void){return 0;}\n' > "$probe/t.c"
if ! "$cc" -fsanitize=thread "$probe/t.c" -o "$probe/t" 2>/dev/null || ! "$probe/t"; then
    echo "SKIP: $cc cannot build and run a -fsanitize=thread program (Debian: libtsan2)"
    exit 77
fi

mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
    "$src/configure" --quiet CC="$cc" CFLAGS="-g -O1 -fsanitize=thread" LDFLAGS="-fsanitize=thread"
fi
make -j"${JOBS:-2}" lib/libfastmm5.la tests/thread-stress > make.log 2>&1 || { tail -40 make.log; exit 1; }

export TSAN_OPTIONS="suppressions=$src/tests/tsan.supp history_size=7 halt_on_error=1 exitcode=66"
# The runs' output is kept in tests/tsan-run.log too: .ci/run prints a failed step's tests/*.log
# last, so a race report is the end of the CI log, not lost above the other builds' logs.
mkdir -p tests
: > tests/tsan-run.log
echo "TSAN_OPTIONS=$TSAN_OPTIONS" | tee -a tests/tsan-run.log
echo "--- kernels as configured" | tee -a tests/tsan-run.log
tests/thread-stress "$seconds" 2>&1 | tee -a tests/tsan-run.log
echo "--- portable C kernels (FASTMM5_DISABLE_ASM=1)" | tee -a tests/tsan-run.log
FASTMM5_DISABLE_ASM=1 tests/thread-stress "$seconds" 2>&1 | tee -a tests/tsan-run.log
echo "PASS: no data race reported by ThreadSanitizer"
